"""``haproof bench history``: what a nightly audit costs as the archive ages, one JSON line.

Writes a synthetic archive at production density straight into a store (no brokers): per group,
``--nodes`` nodes holding the same log (real RocketMQ records, CRCs and queue offsets right), a
chunk every ``--chunk-interval-s`` (RocketMQ-style quiet broker: ``archiveIntervalMs`` = 10 s),
a snapshot every ``--snapshot-interval-s`` per node (60 s, ``snapshotIntervalMs``), a clean
failover (``role_changed`` on both nodes, a new epoch) every ``--failover-every-days``. Then, at
each checkpoint day D (``--checkpoints``, default 1,30,365 up to ``--days``):

- ``full``: a full audit of the history before day D (ten minutes, then D-1 days more);
- ``day``: an incremental run after day D's objects are added (a nightly run);
- ``noop``: an incremental run with nothing new;

each with the driver's peak resident memory (this process and its children: the Spark JVM in
local mode; ``rss_growth_mb``: above what it held before the run) and the driver's store requests (``get``, ``list``, keys listed), plus the size of
``state.json``. The figures: ``noop_ratio`` and ``day_ratio`` = last checkpoint / first (targets
<= 1.5), ``state_bytes`` (target < 1 MB).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from contracts import archive_layout as layout
from contracts import record as m
from contracts.object_store import StoreSpec

DAY_MS = 86_400_000
T0_MS = 1_700_000_000_000  # the synthetic history's first millisecond
CLUSTER = "hist"
QUEUES = 4


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("history", help="nightly audit cost as the archive ages")
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--bytes-per-day", type=int, default=0, help="0: one small record a chunk")
    p.add_argument("--chunk-interval-s", type=int, default=10)
    p.add_argument("--snapshot-interval-s", type=int, default=60)
    p.add_argument("--failover-every-days", type=float, default=7.0)
    p.add_argument("--checkpoints", default="1,30,365", help="days to measure at (<= --days)")
    p.add_argument("--root", default=None, help="archive root (default: a temporary file://)")
    p.add_argument("--s3", action="store_true", help="write to the embedded S3 server instead")
    p.add_argument("--spark-master", default="local[2]")
    p.set_defaults(func=run)


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
    now_ms: int = T0_MS
    end: int = 0
    epoch: int = 0
    master: int = 0
    queue_offsets: list[int] = field(default_factory=lambda: [0] * QUEUES)
    objects: int = 0
    _dirs: set = field(default_factory=set)

    def put(self, key: str, data: bytes) -> None:
        self.objects += 1
        if self.fast_path is None:
            self.store.put_mutable(key, data)
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
            enc = m.encode_message(
                m.Message("HistTopic", b"h" * self.record_bytes, queue_id=q,
                          properties={"TAGS": "t"}, born_timestamp=self.now_ms),
                ("127.0.0.1", 10911),
            )  # fmt: skip
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
                start, self.end, self.records_per_chunk, self.now_ms, self.now_ms, digest, node,
                0 if i == self.master else 1, self.role(i), self.epoch, self.now_ms, 1 << 40,
            )  # fmt: skip
            self.put(key, data)
            self.put(layout.manifest_key(key), man.to_json())

    def snapshots(self, group: str) -> None:
        offsets = {str(q): o for q, o in enumerate(self.queue_offsets)}
        for i in range(self.nodes):
            node = self.node_name(i)
            master = i == self.master
            snap = layout.Snapshot(
                node, group, 0 if master else 1, self.role(i), self.epoch, self.now_ms,
                self.end, self.end, self.end if master else 0,
                slaves={self.node_name(j): self.end for j in range(self.nodes) if j != i}
                if master else {},
                consumerOffsets={"HistTopic@cg": offsets},
                queueMaxOffsets={"HistTopic": offsets},
                mappedFileSize=1 << 40,
            )  # fmt: skip
            self.put(layout.snapshot_key(CLUSTER, group, node, self.now_ms), snap.to_json())

    def failover(self) -> None:
        """A clean switchover: the next node becomes master in a new epoch."""
        old, self.master = self.master, (self.master + 1) % self.nodes
        self.epoch += 1
        if self.nodes < 2:
            return
        for g in range(self.groups):
            for i, (frm, to) in ((old, ("SYNC_MASTER", "SLAVE")), (self.master, ("SLAVE", "SYNC_MASTER"))):  # fmt: skip
                node = self.node_name(i)
                doc = layout.make_event("role_changed", node, CLUSTER, f"g{g}", self.now_ms,
                                        self.epoch, **{"from": frm, "to": to})  # fmt: skip
                key = layout.event_key(CLUSTER, f"g{g}", node, self.now_ms, "role_changed")
                self.put(key, layout.json_bytes(doc))


class PeakRss:
    """The peak resident memory of this process and its children, sampled every 50 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()

    def _loop(self) -> None:
        while True:
            self.peak = max(self.peak, rss_tree(os.getpid()))
            if self._stop.wait(0.05):
                return


def rss_tree(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (Linux /proc)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return total


def timed_audit(spark, spec: StoreSpec, incremental: bool) -> dict:
    from spark_jobs.archive_reader import executor_store
    from spark_jobs.audit import AuditOptions, run_audit

    store = executor_store(spec)
    before = dict(store.requests)
    start_rss = rss_tree(os.getpid())
    with PeakRss() as mem:
        t0 = time.monotonic()
        v = run_audit(spark, AuditOptions(spec=spec, cluster=CLUSTER, incremental=incremental))
        seconds = time.monotonic() - t0
    req = {k: n - before.get(k, 0) for k, n in store.requests.items() if n != before.get(k, 0)}
    if not v["passed"]:
        raise RuntimeError(f"the synthetic history failed its audit: {json.dumps(v)[:2000]}")
    return {
        "s": round(seconds, 3),
        "peak_rss_mb": round(mem.peak / 2**20, 1),
        # what this run added to what the process already held (an earlier, larger run's
        # heap is kept by Python and the JVM and reused, so peak_rss_mb alone overstates)
        "rss_growth_mb": round(max(0, mem.peak - start_rss) / 2**20, 1),
        "requests": req,
    }


def run(args: argparse.Namespace) -> int:
    from spark_jobs.session import get_spark

    checkpoints = sorted({int(d) for d in args.checkpoints.split(",") if 0 < int(d) <= args.days})
    if not checkpoints or args.nodes < 1 or args.groups < 1 or args.chunk_interval_s < 1:
        print("haproof bench history: nothing to measure (check --days, --checkpoints)",
              file=sys.stderr)  # fmt: skip
        return 2
    work = tempfile.mkdtemp(prefix="haproof-history-")
    server = None
    try:
        if args.s3:
            from tools.s3server import S3Server

            server = S3Server.start()
            server.create_bucket("history")
            spec = StoreSpec("s3://history/archive", **server.store_options())
        else:
            spec = StoreSpec(args.root or f"file://{work}/archive")
        store = spec.open()
        fast = store.path if hasattr(store, "path") else None
        per_day = DAY_MS // (args.chunk_interval_s * 1000)
        body = 64
        rec_len = len(m.encode_message(m.Message("HistTopic", b"h" * body), ("127.0.0.1", 1)))
        per_chunk = max(1, args.bytes_per_day // max(1, per_day * rec_len))
        w = Writer(
            store, fast, args.groups, args.nodes, body, per_chunk, args.chunk_interval_s * 1000,
            args.snapshot_interval_s * 1000, int(args.failover_every_days * DAY_MS),
        )  # fmt: skip
        spark = get_spark("haproof-bench-history", args.spark_master, {})
        out: dict = {"bench": "history", "root": spec.root.split("://")[0], "days": args.days,
                     "groups": args.groups, "nodes": args.nodes, "chunks_per_day": per_day,
                     "records_per_chunk": per_chunk, "record_bytes": rec_len,
                     "cpus": os.cpu_count(), "at": {}}  # fmt: skip
        # ten minutes of history before day 1 (at least a chunk and a snapshot)
        base_ms = T0_MS + max(600_000, w.chunk_ms, w.snapshot_ms)
        for d in checkpoints:
            t0 = time.monotonic()
            w.write_until(base_ms + (d - 1) * DAY_MS)
            write_s = time.monotonic() - t0
            full = timed_audit(spark, spec, incremental=False)
            w.write_until(base_ms + d * DAY_MS)
            day = timed_audit(spark, spec, incremental=True)
            noop = timed_audit(spark, spec, incremental=True)
            state = sum(
                len(store.get(layout.audit_state_key(CLUSTER, f"g{g}"))) for g in range(args.groups)
            )
            out["at"][str(d)] = {"objects": w.objects, "write_s": round(write_s, 1),
                                 "full": full, "day": day, "noop": noop, "state_bytes": state}  # fmt: skip
            print(f"bench history: day {d}: {json.dumps(out['at'][str(d)])}", file=sys.stderr)
        first, last = out["at"][str(checkpoints[0])], out["at"][str(checkpoints[-1])]
        out["noop_ratio"] = round(last["noop"]["s"] / first["noop"]["s"], 3)
        out["day_ratio"] = round(last["day"]["s"] / first["day"]["s"], 3)
        out["state_bytes"] = last["state_bytes"]
        print(json.dumps(out))
        spark.stop()
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
