"""The synthetic history ``haproof bench history`` writes: per group, ``nodes`` nodes holding the
same log (real RocketMQ records, CRCs and queue offsets right), a chunk every ``chunk_ms``, a
snapshot of every node every ``snapshot_ms``, a clean failover (``role_changed`` on both nodes,
a new epoch) every ``failover_ms``; keys from ``contracts.archive_layout``."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from contracts import archive_layout as layout
from contracts.record.builder import encode_message
from contracts.record.model import Message

T0_MS = 1_700_000_000_000  # the synthetic history's first millisecond
CLUSTER = "hist"
QUEUES = 4


@dataclass
class Writer:
    """Appends the synthetic history of every group, interval by interval."""

    store: object
    fast_path: str | None  # file:// directory: plain writes (the bench's own setup, no fsync)
    groups: int
    nodes: int
    record_bytes: int
    records_per_chunk: int
    chunk_ms: int
    snapshot_ms: int
    failover_ms: int
    mirror: object | None = None  # a second store every object also goes to (``--s3-mirror``)
    now_ms: int = T0_MS
    end: int = 0
    epoch: int = 0
    master: int = 0
    queue_offsets: list[int] = field(default_factory=lambda: [0] * QUEUES)
    objects: int = 0
    _dirs: set = field(default_factory=set)
    pending: list = field(default_factory=list)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(8))

    def drain(self) -> None:
        """Wait for the PUTs in flight (raising the first error)."""
        done, self.pending = self.pending, []
        for f in done:
            f.result()

    def _submit(self, store, key: str, data: bytes) -> None:
        """A PUT in flight (S3: a few at once, the server answers in threads)."""
        self.pending.append(self.pool.submit(store.put_mutable, key, data))
        if len(self.pending) >= 256:
            self.drain()

    def put(self, key: str, data: bytes) -> None:
        self.objects += 1
        if self.mirror is not None:
            self._submit(self.mirror, key, data)
        if self.fast_path is None:
            self._submit(self.store, key, data)
            return
        path = os.path.join(self.fast_path, key)
        d = os.path.dirname(path)
        if d not in self._dirs:
            os.makedirs(d, exist_ok=True)
            self._dirs.add(d)
        with open(path, "wb") as fh:
            fh.write(data)

    def node_name(self, i: int) -> str:
        return f"n{i}"

    def role(self, i: int) -> str:
        return "SYNC_MASTER" if i == self.master else "SLAVE"

    def write_until(self, until_ms: int) -> None:
        self._write_until(until_ms)
        self.drain()

    def _write_until(self, until_ms: int) -> None:
        while self.now_ms + self.chunk_ms <= until_ms:
            self.now_ms += self.chunk_ms
            if self.failover_ms and self.now_ms % self.failover_ms < self.chunk_ms:
                self.failover()
            data, first = self.chunk_bytes()
            for g in range(self.groups):
                self.chunk(f"g{g}", data, first)
            if self.now_ms % self.snapshot_ms < self.chunk_ms:
                for g in range(self.groups):
                    self.snapshots(f"g{g}")

    def chunk_bytes(self) -> tuple[bytes, int]:
        """Records for one interval (the same in every group and on every node)."""
        out = []
        start = self.end
        for k in range(self.records_per_chunk):
            q = (self.now_ms // self.chunk_ms + k) % QUEUES
            enc = encode_message(
                Message(
                    "HistTopic",
                    b"h" * self.record_bytes,
                    queue_id=q,
                    properties={"TAGS": "t"},
                    born_timestamp=self.now_ms,
                ),
                ("127.0.0.1", 10911),
            )
            out.append(bytes(enc.stamp(self.queue_offsets[q], self.end, self.now_ms)))
            self.queue_offsets[q] += 1
            self.end += len(enc)
        return b"".join(out), start

    def chunk(self, group: str, data: bytes, start: int) -> None:
        digest = hashlib.sha256(data).hexdigest()
        for i in range(self.nodes):
            node = self.node_name(i)
            key = layout.chunk_key(CLUSTER, group, node, start, self.end, self.epoch)
            man = layout.ChunkManifest(
                start,
                self.end,
                self.records_per_chunk,
                self.now_ms,
                self.now_ms,
                digest,
                node,
                0 if i == self.master else 1,
                self.role(i),
                self.epoch,
                self.now_ms,
                1 << 40,
            )
            self.put(key, data)
            self.put(layout.manifest_key(key), man.to_json())

    def snapshots(self, group: str) -> None:
        offsets = {str(q): o for q, o in enumerate(self.queue_offsets)}
        for i in range(self.nodes):
            node = self.node_name(i)
            master = i == self.master
            snap = layout.Snapshot(
                node,
                group,
                0 if master else 1,
                self.role(i),
                self.epoch,
                self.now_ms,
                self.end,
                self.end,
                self.end if master else 0,
                slaves={self.node_name(j): self.end for j in range(self.nodes) if j != i}
                if master
                else {},
                consumerOffsets={"HistTopic@cg": offsets},
                queueMaxOffsets={"HistTopic": offsets},
                mappedFileSize=1 << 40,
            )
            self.put(layout.snapshot_key(CLUSTER, group, node, self.now_ms), snap.to_json())

    def failover(self) -> None:
        """A clean switchover: the next node becomes master in a new epoch."""
        old, self.master = self.master, (self.master + 1) % self.nodes
        self.epoch += 1
        if self.nodes < 2:
            return
        for g in range(self.groups):
            for i, (frm, to) in (
                (old, ("SYNC_MASTER", "SLAVE")),
                (self.master, ("SLAVE", "SYNC_MASTER")),
            ):
                node = self.node_name(i)
                doc = layout.make_event(
                    "role_changed",
                    node,
                    CLUSTER,
                    f"g{g}",
                    self.now_ms,
                    self.epoch,
                    **{"from": frm, "to": to},
                )
                key = layout.event_key(CLUSTER, f"g{g}", node, self.now_ms, "role_changed")
                self.put(key, layout.json_bytes(doc))
