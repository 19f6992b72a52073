"""NodeArchiver over a real in-process store (no remoting), with an injected clock."""

from __future__ import annotations

import asyncio

from broker.archive import layout
from broker.archive.bench_live import _StoreNode
from broker.archive.node_archiver import NodeArchiver
from broker.archive.object_store import open_store
from broker.config import BrokerConfig
from broker.store.message import Message
from broker.store.message_store import MessageStore
from tests.archive.live import wait_for


def test_two_snapshots_in_one_millisecond_both_land_and_shipping_goes_on(tmp_path) -> None:
    root = f"file://{tmp_path}/archive"
    cfg = BrokerConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=64 * 1024,
        archive_enable=True,
        archive_root=root,
        archive_interval_ms=50,
        snapshot_interval_ms=3_600_000,
        broker_cluster_name="C",
        broker_name="broker-a",
        flush_interval_commit_log_ms=10,
    )
    store = MessageStore.open(cfg)
    store.start()
    archive = open_store(root)
    archiver = NodeArchiver(_StoreNode(cfg, store), clock_ms=lambda: 1_700_000_000_000)
    prefix = layout.node_prefix("C", "broker-a", "bench-0")

    async def scenario() -> None:
        await archiver.start()  # writes a snapshot at the frozen millisecond
        try:
            for i in range(50):
                store.put_message(Message("T", b"x" * 100, queue_id=i % 2)).result()
            store.flush_all()
            # same millisecond, different content (the store grew): must not block the worker
            archiver._jobs.put(("snapshot", archiver._snapshot()))
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
