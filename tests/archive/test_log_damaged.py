"""A log damaged mid-way: shipping stops before the damage and the archive says so with one
``log_damaged`` event per damaged offset (``contracts/log_events.py``), from the shipper over a
store directory (a real RocketMQ store), ``haproof archive`` and the in-broker archiver."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.archive.node_archiver import NodeArchiver
from broker.archive.shipper import NodeIdentity, Shipper
from broker.archive.sources import StoreDirSource
from broker.config import BrokerRole
from broker.store.message_store import MessageStore
from contracts import archive_layout as layout
from contracts.log_events import LOG_DAMAGED
from contracts.object_store import open_store
from contracts.record.model import Message
from tests.archive.live import wait_for
from tests.archive.test_node_archiver_unit import _config, _with_archiver
from tests.archive.test_shipper import bad_magic_store
from tests.spark_jobs.builder import FILE_SIZE, make_store, truncate_log
from tests.support.haproof_cli import archive_argv

DAMAGED_AT = 16384 + 172 * 3  # bad_magic_store: the 4th record of the golden store's 2nd file


def _events(store, cluster: str, group: str, node: str) -> list[dict]:
    prefix = layout.node_prefix(cluster, group, node) + layout.EVENTS
    docs = [layout.parse_event(store.get(o.key), what=o.key) for o in store.list(prefix)]
    return [d for d in docs if d["kind"] == LOG_DAMAGED]


def test_a_real_rocketmq_store_damaged_mid_log_ships_up_to_it_and_records_it_once(
    tmp_path, golden_stores
) -> None:
    store_dir = bad_magic_store(golden_stores, tmp_path)
    archive = open_store(f"file://{tmp_path}/a")
    ident = NodeIdentity("c1", "broker-a", "a-1", 1, "SLAVE")
    shipper = Shipper(archive, ident, clock_ms=lambda: 1_700_000_000_000)
    first = shipper.ship(StoreDirSource.open(str(store_dir)))
    assert first.end == DAMAGED_AT and first.stopped_by.offset == DAMAGED_AT
    assert first.damage_event is not None
    # retried by the same shipper, and by a new one (a process started again): no new event
    again = shipper.ship(StoreDirSource.open(str(store_dir)))
    later = Shipper(archive, NodeIdentity("c1", "broker-a", "a-1", 1, "SLAVE"))
    third = later.ship(StoreDirSource.open(str(store_dir)))
    assert again.stopped_by.offset == third.stopped_by.offset == DAMAGED_AT
    assert again.damage_event is None and third.damage_event is None
    [event] = _events(archive, "c1", "broker-a", "a-1")
    assert (event["node"], event["offset"], event["at"]) == ("a-1", DAMAGED_AT, 1_700_000_000_000)
    assert "magic" in event["reason"]


def test_haproof_archive_exits_1_naming_the_event_and_writes_it_once(
    tmp_path, golden_stores
) -> None:
    store_dir = bad_magic_store(golden_stores, tmp_path)
    root = f"file://{tmp_path}/a"
    argv = archive_argv(store_dir, root, "rmq", "broker-a", "broker-a-1", "--role", "SLAVE")
    runs = [subprocess.run(argv, capture_output=True, text=True, timeout=120) for _ in range(2)]
    assert [r.returncode for r in runs] == [1, 1]
    assert f"corrupt record at offset {DAMAGED_AT}" in runs[0].stderr
    assert "recorded as v1/rmq/broker-a/broker-a-1/events/" in runs[0].stderr
    assert "recorded as" not in runs[1].stderr  # the second run found it there
    [event] = _events(open_store(root), "rmq", "broker-a", "broker-a-1")
    assert event["offset"] == DAMAGED_AT


def test_the_in_broker_archiver_records_damage_once_across_its_retry_rounds(
    tmp_path, caplog
) -> None:
    root, cfg = _config(tmp_path, archive_interval_ms=20)
    store = MessageStore.open(cfg)
    store.start()
    wrote = [
        store.put_message(Message("T", b"s" * 300, queue_id=i % 2)).result() for i in range(40)
    ]
    store.flush_all()
    store.role_state.change(BrokerRole.SLAVE, 1)  # what it wrote, as a slave's copy
    damaged = wrote[25].wrote_offset
    # a disk fault under a running node: the record's magic code changes on disk
    log_file = f"{store.commit_log.queue.directory}/{0:020d}"
    with open(log_file, "r+b") as f:
        f.seek(damaged + 4)
        f.write(b"\x00\x00\x00\x07")
    archiver = NodeArchiver(store, cfg, "broker-a-1")

    async def body() -> None:
        await asyncio.to_thread(
            wait_for,
            lambda: archiver.last_error is not None and archiver.archived_end == damaged,
            what="the archiver to ship up to the damage",
        )
        rounds = archiver.rounds
        await asyncio.to_thread(
            wait_for, lambda: archiver.rounds >= rounds + 3, what="three retry rounds"
        )

    _with_archiver(archiver, store, body)
    assert f"corrupt record at offset {damaged}" in archiver.last_error
    errors = [
        r
        for r in caplog.records
        if r.name.endswith("node_archiver") and r.levelno >= logging.WARNING
    ]
    assert [r.levelname for r in errors] == ["ERROR"]  # once, not once per retry round
    [event] = _events(open_store(root), "C", "broker-a", "broker-a-1")
    assert (event["node"], event["offset"]) == ("broker-a-1", damaged)
    assert "magic" in event["reason"]


@pytest.fixture(scope="module")
def our_store(tmp_path_factory) -> tuple[Path, list]:
    path = tmp_path_factory.mktemp("ours") / "store"
    return path, make_store(path, 60)  # 15 files of 4 KiB, BLANKs at their ends


#: structural damage at a record's start: what the shipper's walk must stop at
DAMAGE = {
    "magic": lambda rec, size: rec[:4] + b"\x00\x00\x00\x07",
    "size_past_the_file": lambda rec, size: (2 * FILE_SIZE).to_bytes(4, "big") + rec[4:8],
    "size_short": lambda rec, size: (size - 7).to_bytes(4, "big") + rec[4:8],
    "zeroed_header": lambda rec, size: bytes(8),  # a zeroed page over the header: a hole
}


@settings(max_examples=40, deadline=None)
@given(index=st.integers(0, 59), kind=st.sampled_from(sorted(DAMAGE)))
@example(index=59, kind="zeroed_header").via("the last record: zeros, then its own bytes")
@example(index=0, kind="zeroed_header").via("the first record of the log")
def test_shipping_stops_at_the_damage_wherever_it_falls_and_records_it(our_store, index, kind):
    path, results = our_store
    r = results[index]
    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(shutil.copytree(path, Path(tmp) / "store"))
        f = store_dir / "commitlog" / f"{r.wrote_offset - r.wrote_offset % FILE_SIZE:020d}"
        data = bytearray(f.read_bytes())
        at = r.wrote_offset % FILE_SIZE
        data[at : at + 8] = DAMAGE[kind](bytes(data[at : at + 8]), r.wrote_bytes)
        f.write_bytes(bytes(data))
        archive = open_store(f"file://{tmp}/a")
        res = Shipper(archive, NodeIdentity("c1", "broker-a", "a-1", 1, "SLAVE")).ship(
            StoreDirSource.open(str(store_dir))
        )
        assert res.end == r.wrote_offset and res.stopped_by.offset == r.wrote_offset, kind
        [event] = _events(archive, "c1", "broker-a", "a-1")
        assert event["offset"] == r.wrote_offset


def test_a_store_that_only_ends_early_ships_to_its_end_without_an_event(our_store, tmp_path):
    path, results = our_store
    store_dir = Path(shutil.copytree(path, tmp_path / "store"))
    truncate_log(store_dir, results[40].wrote_offset)  # zeros from there to the file's end
    archive = open_store(f"file://{tmp_path}/a")
    res = Shipper(archive, NodeIdentity("c1", "broker-a", "a-1", 1, "SLAVE")).ship(
        StoreDirSource.open(str(store_dir))
    )
    assert (res.end, res.stopped_by, res.damage_event) == (results[40].wrote_offset, None, None)
    assert _events(archive, "c1", "broker-a", "a-1") == []
