"""NodeArchiver over a real in-process store (no remoting), with an injected clock."""

from __future__ import annotations

import asyncio

from broker.archive.node_archiver import NodeArchiver
from broker.config import BrokerConfig, BrokerRole
from broker.store.epoch import EpochFile
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts import archive_layout as layout
from contracts.object_store import open_store
from contracts.record.model import Message
from tests.archive.live import wait_for


def _config(tmp_path, **overrides) -> tuple[str, BrokerConfig]:
    """(archive root, a node config archiving there, as cluster C / broker-a)."""
    root = f"file://{tmp_path}/archive"
    values = dict(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=64 * 1024,
        archive_enable=True,
        archive_root=root,
        snapshot_interval_ms=3_600_000,
        broker_cluster_name="C",
        broker_name="broker-a",
    )
    return root, BrokerConfig(**{**values, **overrides})


def test_two_snapshots_in_one_millisecond_both_land_and_shipping_goes_on(tmp_path) -> None:
    root, cfg = _config(tmp_path, archive_interval_ms=50, flush_interval_commit_log_ms=10)
    store = MessageStore.open(cfg)
    store.start()
    archive = open_store(root)
    archiver = NodeArchiver(store, cfg, "bench-0", clock_ms=lambda: 1_700_000_000_000)
    prefix = layout.node_prefix("C", "broker-a", "bench-0")

    async def scenario() -> None:
        await archiver.start()  # writes a snapshot at the frozen millisecond
        try:
            for i in range(50):
                store.put_message(Message("T", b"x" * 100, queue_id=i % 2)).result()
            store.flush_all()
            # same millisecond, different content (the store grew): must not block the worker
            archiver._jobs.put(("snapshot", archiver.view.snapshot(archiver.clock_ms)))
            for i in range(50):
                store.put_message(Message("T", b"y" * 100, queue_id=i % 2)).result()
            store.flush_all()
            await asyncio.to_thread(
                wait_for,
                lambda: archiver.archived_end >= store.max_phy_offset > 0,
                timeout_s=60,
                what="the worker to ship past the conflicting snapshot",
            )
        finally:
            await archiver.stop()

    try:
        asyncio.run(scenario())
    finally:
        store.shutdown()
    snaps = [
        layout.Snapshot.from_json(archive.get(o.key)) for o in archive.list(prefix + "snapshots/")
    ]
    taken = [s.takenAt for s in snaps]
    assert taken[:2] == [1_700_000_000_000, 1_700_000_000_001]
    assert len(set(taken)) == len(taken)  # every snapshot got its own key
    assert snaps[1].maxPhyOffset > snaps[0].maxPhyOffset
    assert archiver.last_error is None


def _chunks(archive, prefix: str) -> list[layout.ChunkManifest]:
    keys = [o.key for o in archive.list(prefix + "commitlog/") if o.key.endswith(".json")]
    return sorted(
        (layout.ChunkManifest.from_json(archive.get(k)) for k in keys), key=lambda m: m.start
    )


def _labelled_setup(tmp_path, interval_ms: int):
    root, cfg = _config(
        tmp_path, archive_interval_ms=interval_ms, broker_role=BrokerRole.SYNC_MASTER
    )
    # a role state with an epoch file, as a node's (epoch 1 from offset 0)
    role = BrokerRoleState.configured(cfg, EpochFile.load(cfg.store_path_root_dir))
    store = MessageStore.open(cfg, role_state=role)
    store.start()
    role.begin_epoch(1, 0)
    return root, cfg, store, role


def _with_archiver(archiver, store, body):
    """Start ``archiver``, await ``body()``, stop it; then close the store. ``body``'s result."""

    async def scenario():
        await archiver.start()
        try:
            return await body()
        finally:
            await archiver.stop()

    try:
        return asyncio.run(scenario())
    finally:
        store.shutdown()


async def _shipped(archiver, store, what: str) -> None:
    await asyncio.to_thread(
        wait_for, lambda: archiver.archived_end >= store.max_phy_offset > 0, what=what
    )


def _write(store, n: int, fill: bytes) -> None:
    for i in range(n):
        store.put_message(Message("T", fill * 300, queue_id=i % 2)).result()
    store.flush_all()


def _set_role(store, role: BrokerRole) -> None:
    store.role_state.change(role, store.role_state.broker_id)


def _promote(store) -> int:
    """What FailoverService.become_master does to the log, epochs and role."""
    start = store.max_phy_offset
    store.role_state.begin_epoch(2, start)
    _set_role(store, BrokerRole.SYNC_MASTER)
    return start


def test_a_backlog_across_a_promotion_keeps_each_range_own_epoch_and_role(tmp_path) -> None:
    """A slave promoted while its archiver is behind: the epoch-1 bytes it copied ship as epoch
    1 / SLAVE and end exactly where epoch 2 begins; the bytes it wrote as master ship as epoch 2
    (a chunk labelled with the current epoch would make the audit start epoch 2 too early)."""
    root, cfg, store, _role = _labelled_setup(tmp_path, interval_ms=3_600_000)
    archive = open_store(root)
    archiver = NodeArchiver(store, cfg, "bench-0", clock_ms=lambda: 1_700_000_000_000)
    prefix = layout.node_prefix("C", "broker-a", "bench-0")

    _write(store, 40, b"a")  # copied from the old master (written here as master: a slave
    _set_role(store, BrokerRole.SLAVE)  # store takes no puts), archived as a slave's bytes

    async def body() -> int:
        await _shipped(archiver, store, "the first round")
        _set_role(store, BrokerRole.SYNC_MASTER)  # more arrive before the promotion
        _write(store, 40, b"b")
        _set_role(store, BrokerRole.SLAVE)
        start = _promote(store)
        _write(store, 40, b"c")
        archiver._on_role_changed(BrokerRole.SLAVE, BrokerRole.SYNC_MASTER, 2)
        await _shipped(archiver, store, "the backlog across the promotion")
        return start

    epoch2_start = _with_archiver(archiver, store, body)
    chunks = _chunks(archive, prefix)
    labels = [(c.epoch, c.role) for c in chunks]
    assert all(c.end <= epoch2_start or c.start >= epoch2_start for c in chunks), labels
    assert {(c.epoch, c.role) for c in chunks if c.end <= epoch2_start} == {(1, "SLAVE")}
    assert {(c.epoch, c.role) for c in chunks if c.start >= epoch2_start} == {(2, "SYNC_MASTER")}
    assert chunks[0].start == 0 and chunks[-1].end == store.max_phy_offset
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:], strict=False))
    assert archiver.last_error is None


def test_a_restarted_master_labels_its_backlog_by_the_epoch_file(tmp_path) -> None:
    """Restart after a promotion with nothing archived: the epoch file alone splits the log."""
    root, cfg, store, _role = _labelled_setup(tmp_path, interval_ms=50)
    archive = open_store(root)
    _write(store, 30, b"a")
    epoch2_start = _promote(store)
    _write(store, 30, b"b")
    archiver = NodeArchiver(store, cfg, "bench-0", clock_ms=lambda: 1_700_000_000_000)

    _with_archiver(archiver, store, lambda: _shipped(archiver, store, "the backlog"))
    chunks = _chunks(archive, layout.node_prefix("C", "broker-a", "bench-0"))
    assert [(c.start, c.end, c.epoch, c.role) for c in chunks] == [
        (0, epoch2_start, 1, "SLAVE"),
        (epoch2_start, chunks[-1].end, 2, "SYNC_MASTER"),
    ]


def test_epoch_ranges_split_a_range_at_each_epoch_start() -> None:
    from broker.archive.node_archiver import epoch_ranges
    from broker.store.epoch import EpochEntry

    entries = [EpochEntry(1, 100), EpochEntry(2, 500), EpochEntry(4, 900)]
    assert list(epoch_ranges(entries, 0, 1000, 4)) == [
        (0, 100, 0),
        (100, 500, 1),
        (500, 900, 2),
        (900, 1000, 4),
    ]
    assert list(epoch_ranges(entries, 600, 700, 4)) == [(600, 700, 2)]
    assert list(epoch_ranges(entries, 700, 700, 4)) == []
    assert list(epoch_ranges([], 5, 9, 3)) == [(5, 9, 3)]


def test_uploads_run_in_a_niced_child_process_started_again_after_it_dies(tmp_path) -> None:
    """The archiver's reads, hashing and uploads happen in a child process at archiveNice
    (never in the broker's interpreter); a child killed mid-flight is replaced on the next
    round and the archive goes on from where it ends, contiguous."""
    import os
    import signal

    root, cfg, store, _role = _labelled_setup(tmp_path, interval_ms=50)
    archive = open_store(root)
    archiver = NodeArchiver(store, cfg, "bench-0")

    async def body() -> tuple[int, int, int]:
        _write(store, 30, b"a")
        await _shipped(archiver, store, "the first records")
        first = archiver.shipper.pid
        nice = os.getpriority(os.PRIO_PROCESS, first) - os.getpriority(os.PRIO_PROCESS, 0)
        os.kill(first, signal.SIGKILL)
        _write(store, 30, b"b")
        await _shipped(archiver, store, "a new child to ship the rest")
        return first, archiver.shipper.pid, nice

    first, second, nice = _with_archiver(archiver, store, body)
    assert first != second and os.getpid() not in (first, second)
    assert nice == min(cfg.archive_nice, 19 - os.getpriority(os.PRIO_PROCESS, 0))
    assert archiver.shipper.starts == 2 and archiver.shipper.pid is None  # stopped with the node
    chunks = _chunks(archive, layout.node_prefix("C", "broker-a", "bench-0"))
    assert chunks[0].start == 0 and chunks[-1].end == store.max_phy_offset
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:], strict=False))


def _held_scenario(tmp_path, **sizing) -> tuple[NodeArchiver, int, list]:
    """Write a few small records, let the worker run rounds; (archiver, log end, chunks)."""
    root, cfg = _config(tmp_path, archive_interval_ms=20, flush_interval_commit_log_ms=10, **sizing)
    store = MessageStore.open(cfg)
    store.start()
    archiver = NodeArchiver(store, cfg, "bench-0")
    seen: dict = {}

    async def scenario() -> None:
        await archiver.start()
        try:
            # the first round ships at once (the start's event); the records come after it
            await asyncio.to_thread(
                wait_for, lambda: archiver.rounds >= 2, timeout_s=60, what="start"
            )
            for i in range(20):
                store.put_message(Message("T", b"x" * 100, queue_id=i % 2)).result()
            store.flush_all()
            seen["end"] = store.max_phy_offset
            rounds = archiver.rounds
            await asyncio.to_thread(
                wait_for, lambda: archiver.rounds >= rounds + 10, timeout_s=60, what="rounds"
            )
            seen["held_end"] = archiver.archived_end
            if cfg.archive_chunk_max_age_ms < 60_000:
                await asyncio.to_thread(
                    wait_for,
                    lambda: archiver.archived_end >= seen["end"],
                    timeout_s=60,
                    what="the small tail to ship once it is max age old",
                )
        finally:
            await archiver.stop()

    try:
        asyncio.run(scenario())
    finally:
        store.shutdown()
    prefix = layout.node_prefix("C", "broker-a", "bench-0")
    return archiver, seen, _chunks(open_store(root), prefix)


def test_small_tail_is_held_back_until_max_age_then_shipped(tmp_path) -> None:
    archiver, seen, chunks = _held_scenario(
        tmp_path, archive_chunk_min_bytes=1 << 20, archive_chunk_max_age_ms=600_000
    )
    assert seen["held_end"] == 0  # ten rounds and nothing shipped: below the minimum size
    # the final round at stop ships everything flushed, as one chunk
    assert [(c.start, c.end) for c in chunks] == [(0, seen["end"])]


def test_small_tail_ships_within_its_max_age(tmp_path) -> None:
    archiver, seen, chunks = _held_scenario(
        tmp_path, archive_chunk_min_bytes=1 << 20, archive_chunk_max_age_ms=300
    )
    assert chunks[0].start == 0 and chunks[-1].end >= seen["end"]
