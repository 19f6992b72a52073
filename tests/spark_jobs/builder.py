"""Build archives with known faults from real broker code (store + shipper)."""

from __future__ import annotations

import shutil
from pathlib import Path

from broker.archive.shipper import NodeIdentity, Shipper
from broker.archive.sources import StoreDirSource
from broker.config import BrokerConfig
from broker.store.message_store import MessageStore
from contracts import archive_layout as layout
from contracts.object_store import StoreSpec, open_store
from contracts.record.layout import I64, OFFSET_QUEUEOFFSET
from contracts.record.model import Message
from contracts.record.prop_crc import fill_crc

CLUSTER, GROUP = "c1", "broker-a"
FILE_SIZE = 4096


def make_store(path: Path, n: int, *, queues: int = 2, gap_after: int | None = None) -> list:
    """A commit log of ``n`` messages; returns the put results (offsets known exactly).

    ``gap_after=i`` (one queue) rewrites the QUEUEOFFSET field of record i and later ones on disk
    (+1), and their record CRC property with it (as a writer that skipped a queue offset would
    have written them), leaving a queue-offset gap before record i.
    """
    results = _make_store(path, n, queues)
    if gap_after is not None:
        for r in results[gap_after:]:
            f = path / "commitlog" / f"{r.wrote_offset - r.wrote_offset % FILE_SIZE:020d}"
            data = bytearray(f.read_bytes())
            at = r.wrote_offset % FILE_SIZE
            rec = data[at : at + r.wrote_bytes]
            rec[OFFSET_QUEUEOFFSET : OFFSET_QUEUEOFFSET + 8] = I64.pack(r.queue_offset + 1)
            fill_crc(rec)
            data[at : at + r.wrote_bytes] = rec
            f.write_bytes(bytes(data))
    return results


def _make_store(path: Path, n: int, queues: int, first: int = 0) -> list:
    cfg = BrokerConfig(
        store_path_root_dir=str(path),
        mapped_file_size_commit_log=FILE_SIZE,
        mapped_file_size_consume_queue=20 * 100,
    )
    store = MessageStore.open(cfg, clock_ms=iter(range(1_000_000, 10_000_000, 10)).__next__)
    results = []
    for i in range(first, first + n):
        r = store.put_message(
            Message(
                "orders", f"msg-{i}".encode() * 10, queue_id=i % queues, properties={"TAGS": "t"}
            )
        ).result()
        results.append(r)
    store.shutdown()
    return results


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def flip(store_dir: Path, offset: int) -> None:
    f = store_dir / "commitlog" / f"{offset - offset % FILE_SIZE:020d}"
    data = bytearray(f.read_bytes())
    data[offset % FILE_SIZE] ^= 0x01
    f.write_bytes(bytes(data))


def truncate_log(store_dir: Path, end: int) -> None:
    """Keep only [0, end) of a stopped store's commit log (a slave that lags)."""
    for f in sorted((store_dir / "commitlog").iterdir()):
        start = int(f.name)
        if start >= end:
            f.unlink()
        elif start + FILE_SIZE > end:
            data = bytearray(f.read_bytes())
            data[end - start :] = bytes(FILE_SIZE - (end - start))
            f.write_bytes(bytes(data))


class Archive:
    """An archive root (``file://``) and the broker group (``group``, a brokerName) to build in."""

    def __init__(self, root: Path, group: str = GROUP):
        self.group = group
        self.root = f"file://{root}"
        self.store = open_store(self.root)
        self.spec = StoreSpec(self.root)

    def ship(self, store_dir: Path, node: str, role: str, broker_id: int, chunk: int, epoch=0):
        ident = NodeIdentity(CLUSTER, self.group, node, broker_id, role, epoch)
        return Shipper(self.store, ident, chunk_max_bytes=chunk).ship(
            StoreDirSource.open(str(store_dir))
        )

    def snapshot(self, node: str, role: str, taken_at: int, **fields) -> None:
        doc = dict(
            node=node,
            brokerName=self.group,
            brokerId=0 if role != "SLAVE" else 1,
            role=role,
            epoch=0,
            takenAt=taken_at,
            maxPhyOffset=0,
            flushedOffset=0,
            confirmOffset=0,
            slaves={},
            consumerOffsets={},
            queueMaxOffsets={},
            mappedFileSize=FILE_SIZE,
        )
        doc.update(fields)
        snap = layout.Snapshot(**doc)
        self.store.put(layout.snapshot_key(CLUSTER, self.group, node, taken_at), snap.to_json())

    def event(self, node: str, kind: str, at: int, epoch: int = 0, **fields) -> None:
        doc = layout.make_event(kind, node, CLUSTER, self.group, at, epoch, **fields)
        key = layout.event_key(CLUSTER, self.group, node, at, kind)
        self.store.put(key, layout.json_bytes(doc))


def pair_archive(root: Path, master_dir: Path, slave_dir: Path) -> Archive:
    """Master a-0 and slave a-1 of ``GROUP`` shipped from their stores into ``root``, with
    other chunk boundaries (3000 and 5000 bytes)."""
    archive = Archive(root)
    archive.ship(master_dir, "a-0", "SYNC_MASTER", 0, chunk=3000)
    archive.ship(slave_dir, "a-1", "SLAVE", 1, chunk=5000)
    return archive


def grow_store(path: Path, n: int, already: int, queues: int = 2) -> list:
    """Append ``n`` more messages to a stopped store made by :func:`make_store`."""
    return _make_store(path, n, queues, first=already)
