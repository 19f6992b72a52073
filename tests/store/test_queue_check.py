"""Consume queue damage (issue #28): an entry past the log, random bytes, zeroed entries and an
emptied CQ file are detected (on start-up or on read), logged naming the queue and entry,
rebuilt from the commit log, and a consumer reads every message exactly once."""

from __future__ import annotations

import logging
import os
import random
import shutil
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.store.message_store import MessageStore
from contracts.record.model import Message
from contracts.record.reader import decode_record

N = 120  # 60 a queue: two CQ files of 50 entries (the conftest's 20 * 50 bytes)
CQ_FILE = 20 * 50


def _fill(open_store) -> tuple[MessageStore, list[bytes]]:
    store = open_store()
    bodies = []
    for i in range(N):
        body = f"m-{i:04d}".encode()
        store.put_message(Message("t", body, queue_id=i % 2)).result()
        bodies.append(body)
    return store, bodies


def _consume(store: MessageStore, queue_id: int, batch: int = 7) -> list[bytes]:
    got: list[bytes] = []
    offset = 0
    for _ in range(1000):
        res = store.get_message("t", queue_id, offset, batch)
        got += [decode_record(r).body for r in res.records]
        if res.next_begin_offset == offset and not res.records:
            if offset >= store.get_max_offset_in_queue("t", queue_id):
                return got
            continue  # an answer the client retries
        offset = res.next_begin_offset
        if offset >= store.get_max_offset_in_queue("t", queue_id):
            return got
    raise AssertionError("consumer stalled")


def _cq_path(store_root: str, entry: int) -> tuple[str, int]:
    start = entry * 20 - entry * 20 % CQ_FILE
    return os.path.join(store_root, "consumequeue", "t", "0", f"{start:020d}"), entry * 20 % CQ_FILE


def _write_entry(root: str, entry: int, data: bytes) -> None:
    path, pos = _cq_path(root, entry)
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


DAMAGE = {
    "past_log": lambda rng: struct.pack(">qiq", 1 << 40, 100, 0),
    "random": lambda rng: rng.randbytes(20),
    "zeroed": lambda rng: bytes(20),
    "other_queue": lambda rng: None,  # points at a record of queue 1
}


def _damage(store: MessageStore, root: str, kind: str, entries: list[int], seed: int) -> None:
    rng = random.Random(seed)
    for e in entries:
        if kind == "other_queue":
            phy, size, tag = store.consume_queue("t", 1).get(e)
            data = struct.pack(">qiq", phy, size, tag)
        else:
            data = DAMAGE[kind](rng)
        _write_entry(root, e, data)


def _expected(bodies: list[bytes], queue_id: int) -> list[bytes]:
    return [b for i, b in enumerate(bodies) if i % 2 == queue_id]


def _check(store: MessageStore, bodies: list[bytes], caplog) -> None:
    assert _consume(store, 0) == _expected(bodies, 0)
    assert _consume(store, 1) == _expected(bodies, 1)
    assert any("consume queue t/0" in r.getMessage() for r in caplog.records), caplog.text
    assert store.get_max_offset_in_queue("t", 0) == 60


def _run_on_read(open_store, caplog, kind: str, entries: list[int], seed: int) -> None:
    store, bodies = _fill(open_store)
    store.flush_all()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _damage(store, store.root, kind, entries, seed)  # the CQ is mapped: seen at once
        _check(store, bodies, caplog)
    store.shutdown()


def _run_on_start(open_store, caplog, kind: str, entries: list[int], seed: int) -> None:
    store, bodies = _fill(open_store)
    root = store.root
    _damage(store, root, kind, entries, seed)
    store.shutdown()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = open_store()
        _check(again, bodies, caplog)
        again.shutdown()


def test_an_entry_past_the_log_is_rebuilt_on_read(open_store, caplog):
    _run_on_read(open_store, caplog, "past_log", [17], 0)


def test_random_bytes_are_rebuilt_on_read(open_store, caplog):
    _run_on_read(open_store, caplog, "random", [3, 4, 5], 1)


def test_zeroed_entries_are_rebuilt_on_read(open_store, caplog):
    _run_on_read(open_store, caplog, "zeroed", [10, 11], 0)


def test_an_entry_of_another_queue_is_rebuilt_on_read(open_store, caplog):
    _run_on_read(open_store, caplog, "other_queue", [20], 0)


def test_damage_is_found_and_rebuilt_at_start_up(open_store, caplog, tmp_path):
    for kind in ("past_log", "random", "zeroed", "other_queue"):
        _run_on_start(open_store, caplog, kind, [59], 7)  # the tail entry: always checked
        shutil.rmtree(tmp_path / "store")
    assert "rebuilt from the commit log" in caplog.text


def test_zeroed_middle_entries_are_found_at_start_up(open_store, caplog):
    _run_on_start(open_store, caplog, "zeroed", [52, 53], 0)


def test_an_emptied_cq_file_is_rebuilt(open_store, caplog):
    for which in (0, 50):  # the first (a middle) file, then the last one
        store, bodies = _fill(open_store)
        root = store.root
        store.shutdown()
        path, _ = _cq_path(root, which)
        os.truncate(path, 0)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            again = open_store()
            _check(again, bodies, caplog)
            again.shutdown()
        shutil.rmtree(root)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.sampled_from(sorted(DAMAGE)),
    entries=st.lists(st.integers(0, 59), min_size=1, max_size=6, unique=True),
    seed=st.integers(0, 2**16),
    on_read=st.booleans(),
)
def test_any_damaged_entries_are_rebuilt(
    open_store, caplog, tmp_path, kind, entries, seed, on_read
):
    shutil.rmtree(tmp_path / "store", ignore_errors=True)
    run = _run_on_read if on_read else _run_on_start
    run(open_store, caplog, kind, entries, seed)
