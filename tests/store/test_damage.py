"""Damage is not a torn tail: a flipped byte or a zeroed page followed by valid records is
refused on a master (nothing moved), quarantined by ``haproof store repair`` (everything valid
kept), or refetched by a slave (the dropped bytes kept in a side file)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from broker.config import BrokerRole
from broker.store.message_store import MessageStore
from broker.store.recovery import QUARANTINE_DIR, StoreDamagedError
from contracts.record.model import Message
from contracts.record.reader import decode_record, scan_records

FILE_SIZE = 16 * 1024
N = 120


def _fill(open_store, **cfg) -> tuple[MessageStore, list]:
    store = open_store(mapped_file_size_commit_log=FILE_SIZE, **cfg)
    rs = [
        store.put_message(Message("t", f"msg-{i:04d}".encode() * 20, queue_id=i % 2)).result()
        for i in range(N)
    ]
    return store, rs


def _digest(root) -> dict[str, str]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n in ("lock",):
                continue
            p = os.path.join(dirpath, n)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def _flip(cfg, offset: int, xor: int = 0xFF) -> None:
    size = cfg.mapped_file_size_commit_log
    path = os.path.join(cfg.store_path_commit_log, f"{offset - offset % size:020d}")
    with open(path, "r+b") as fh:
        fh.seek(offset % size)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ xor]))


def _bodies(store: MessageStore) -> list[bytes]:
    out = []
    for q in (0, 1):
        got = store.get_message("t", q, 0, 10_000, max_bytes=1 << 30)
        out += [decode_record(b).body for b in got.records]
    return sorted(out)


def _expected(skip: set[int] = frozenset()) -> list[bytes]:
    return sorted(f"msg-{i:04d}".encode() * 20 for i in range(N) if i not in skip)


@pytest.mark.parametrize("where", ["magic", "size", "body"])
def test_flipped_byte_mid_log_refuses_a_master_and_moves_nothing(
    open_store, make_config, where
) -> None:
    store, rs = _fill(open_store)
    store.shutdown()
    cfg = make_config(mapped_file_size_commit_log=FILE_SIZE)
    victim = rs[N - 30]  # within the last three files: what a normal restart scans
    at = {"magic": 4, "size": 1, "body": victim.wrote_bytes - 60}[where]
    _flip(cfg, victim.wrote_offset + at)
    before = _digest(cfg.store_path_root_dir)
    with pytest.raises(StoreDamagedError) as exc:
        MessageStore.open(cfg)
    msg = str(exc.value)
    assert f"damaged commit log at offset {victim.wrote_offset}" in msg
    assert f"{victim.wrote_offset - victim.wrote_offset % FILE_SIZE:020d}" in msg  # the file
    assert f"{victim.wrote_bytes} bytes [{victim.wrote_offset}, {victim.end_offset})" in msg
    assert "haproof store repair" in msg and "nothing was moved" in msg
    assert _digest(cfg.store_path_root_dir) == before  # not a byte changed, no file removed
    MessageStore.open(
        cfg.replace(broker_role=BrokerRole.SLAVE, broker_id=1)
    ).shutdown()  # lock freed


def test_a_zeroed_page_followed_by_records_is_damage_not_a_tail(open_store, make_config) -> None:
    store, rs = _fill(open_store)
    store.shutdown()
    cfg = make_config(mapped_file_size_commit_log=FILE_SIZE)
    victim = rs[N - 20]
    path = os.path.join(
        cfg.store_path_commit_log, f"{victim.wrote_offset // FILE_SIZE * FILE_SIZE:020d}"
    )
    with open(path, "r+b") as fh:
        fh.seek(victim.wrote_offset % FILE_SIZE)
        fh.write(bytes(victim.wrote_bytes))
    with pytest.raises(StoreDamagedError, match="zeroed bytes"):
        MessageStore.open(cfg)


def _haproof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_repair_quarantines_the_damaged_range_and_keeps_every_valid_record(
    open_store, make_config
) -> None:
    store, rs = _fill(open_store)
    end = store.max_phy_offset
    store.shutdown()
    cfg = make_config(mapped_file_size_commit_log=FILE_SIZE)
    victim = N - 30
    v = rs[victim]
    with open(
        os.path.join(cfg.store_path_commit_log, f"{v.wrote_offset // FILE_SIZE * FILE_SIZE:020d}"),
        "rb",
    ) as fh:
        fh.seek(v.wrote_offset % FILE_SIZE)
        original = fh.read(v.wrote_bytes)
    _flip(cfg, v.wrote_offset + 1)  # the size field: the walk loses the chain here
    root = cfg.store_path_root_dir
    dry = _haproof("store", "repair", "--dry-run", root)
    assert dry.returncode == 1 and "not changed" in dry.stdout
    r = _haproof("store", "repair", root)
    assert r.returncode == 0, r.stderr
    assert f"[{v.wrote_offset}, {v.end_offset})" in r.stdout and "Traceback" not in r.stderr
    side = os.path.join(root, QUARANTINE_DIR, f"{v.wrote_offset:020d}-{v.end_offset:020d}")
    with open(side + ".bin", "rb") as fh:
        kept = fh.read()
    assert len(kept) == v.wrote_bytes and kept[2:] == original[2:]  # the damaged bytes, as found
    assert json.load(open(side + ".json"))["action"] == "repair"
    store2 = MessageStore.open(cfg)
    try:
        assert store2.max_phy_offset == end  # nothing after the damage was dropped
        assert _bodies(store2) == _expected({victim})  # every other message is served
        assert [r["start"] for r in store2.quarantine_reports] == [v.wrote_offset]
    finally:
        store2.shutdown()
    again = _haproof("store", "repair", root)
    assert again.returncode == 0 and "no damaged range" in again.stdout


def test_a_slave_quarantines_from_the_damage_on_and_truncates_for_refetch(
    open_store, make_config
) -> None:
    store, rs = _fill(open_store)
    end = store.max_phy_offset
    store.shutdown()
    cfg = make_config(
        mapped_file_size_commit_log=FILE_SIZE, broker_role=BrokerRole.SLAVE, broker_id=1
    )
    v = rs[N - 25]
    _flip(cfg, v.wrote_offset + 5)
    store2 = MessageStore.open(cfg)
    try:
        rep = store2.recovery
        assert rep.damage is not None and rep.damage.start == v.wrote_offset
        assert rep.valid_end == v.wrote_offset == store2.max_phy_offset  # refetch from here
        with open(rep.quarantined, "rb") as fh:
            kept = fh.read()
        assert len(kept) == end - v.wrote_offset  # every byte it dropped is in the side file
    finally:
        store2.shutdown()


def test_repair_of_a_busy_store_and_of_nothing_are_one_line(open_store, tmp_path) -> None:
    store, _ = _fill(open_store)
    try:
        r = _haproof("store", "repair", store.root)
        assert r.returncode == 2 and "in use" in r.stderr and "Traceback" not in r.stderr
    finally:
        store.shutdown()
    r = _haproof("store", "repair", str(tmp_path / "nowhere"))
    assert r.returncode == 2 and "no commitlog/ directory" in r.stderr


def _blank_offsets(cfg) -> list[int]:
    """Where each file's BLANK filler starts."""
    out = []
    d = cfg.store_path_commit_log
    for name in sorted(os.listdir(d)):
        data = open(os.path.join(d, name), "rb").read()
        for rec in scan_records(data, base_offset=int(name)):
            if rec.is_blank:
                out.append(rec.physical_offset)
    return out


def test_repair_of_a_damaged_file_end_writes_a_blank_and_keeps_the_next_file(
    open_store, make_config
) -> None:
    store, rs = _fill(open_store)
    end = store.max_phy_offset
    store.shutdown()
    cfg = make_config(mapped_file_size_commit_log=FILE_SIZE)
    blank = _blank_offsets(cfg)[-1]  # the last file end within the scanned files
    _flip(cfg, blank + 4)  # the BLANK's magic
    with pytest.raises(
        StoreDamagedError, match=f"resume at {blank - blank % FILE_SIZE + FILE_SIZE}"
    ):
        MessageStore.open(cfg)
    r = _haproof("store", "repair", cfg.store_path_root_dir)
    assert r.returncode == 0, r.stderr
    store2 = MessageStore.open(cfg)
    try:
        assert store2.max_phy_offset == end and _bodies(store2) == _expected()
    finally:
        store2.shutdown()


def test_any_single_flipped_byte_is_refused_or_loses_nothing(
    open_store, make_config, tmp_path
) -> None:
    """Flip one byte at sampled positions of the last three files (what a restart scans), each
    on a fresh copy of the store: the open either refuses, naming a range that holds the flip,
    or keeps the whole log, or (the last record: indistinguishable from a torn write) drops only
    that record. The record CRC property (enabledAppendPropCRC, on by default) covers the
    header fields outside the body CRC (timestamps, hosts, queue offset) too: no flip is kept
    (without it, RocketMQ's default, such flips keep the log as it is)."""
    import random
    import shutil

    store, rs = _fill(open_store)
    end = store.max_phy_offset
    store.shutdown()
    pristine = make_config().store_path_root_dir
    first = max(0, (end // FILE_SIZE - 2) * FILE_SIZE)
    last = rs[-1].wrote_offset
    positions = sorted(random.Random(16).sample(range(first, end), 40)) + [last + 1, last + 4]
    outcomes = set()
    for i, pos in enumerate(positions):
        root = str(tmp_path / f"copy{i}")
        shutil.copytree(pristine, root)
        cfg = make_config(mapped_file_size_commit_log=FILE_SIZE, store_path_root_dir=root)
        _flip(cfg, pos)
        try:
            s = MessageStore.open(cfg)
        except StoreDamagedError as exc:
            assert exc.damage.start <= pos < exc.damage.resume, (pos, str(exc))
            outcomes.add("refused")
            continue
        got = s.max_phy_offset
        s.shutdown()
        assert got == end or (got == last and pos >= last), (pos, got)
        outcomes.add("kept" if got == end else "torn tail")
    assert outcomes == {"refused", "torn tail"}


def test_a_truncation_cut_short_by_a_crash_is_finished_not_taken_for_damage(
    open_store, make_config
) -> None:
    store, rs = _fill(open_store)
    cut = rs[N - 40].wrote_offset
    store.truncate_dirty(cut)  # completes: no marker left
    assert not os.path.exists(os.path.join(store.root, "truncating"))
    store.shutdown()
    store, rs = _fill(open_store)  # a log again past ``cut``...
    # ... and a crash in the middle of a second truncation: marker written, the first bytes
    # zeroed, old records still after them
    cfg = make_config(mapped_file_size_commit_log=FILE_SIZE)
    cut = rs[N - 60].wrote_offset
    store.flush_all()
    store.close_abruptly()
    with open(os.path.join(cfg.store_path_root_dir, "truncating"), "w") as fh:
        fh.write(str(cut))
    path = os.path.join(cfg.store_path_commit_log, f"{cut // FILE_SIZE * FILE_SIZE:020d}")
    with open(path, "r+b") as fh:
        fh.seek(cut % FILE_SIZE)
        fh.write(bytes(300))
    store2 = MessageStore.open(cfg)
    try:
        assert store2.max_phy_offset == cut and store2.recovery.damage is None
        assert not os.path.exists(os.path.join(cfg.store_path_root_dir, "truncating"))
    finally:
        store2.shutdown()


def test_quarantine_never_overwrites_an_earlier_side_file(tmp_path, open_store) -> None:
    from broker.store.recovery import quarantine

    store, rs = _fill(open_store)
    try:
        first = quarantine(store.root, store.commit_log.queue, 0, 100, "first", "refetch")
        second = quarantine(store.root, store.commit_log.queue, 0, 100, "second", "refetch")
    finally:
        store.shutdown()
    assert first != second and os.path.exists(first) and os.path.exists(second)
    assert json.load(open(first[: -len(".bin")] + ".json"))["reason"] == "first"
