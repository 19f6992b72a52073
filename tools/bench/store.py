"""``haproof bench store``: in-process append throughput and latency, one JSON line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import threading
import time

from broker.config import BrokerConfig, FlushDiskType
from broker.store.message_store import MessageStore
from broker.store.results import PutMessageStatus
from contracts.record.model import Message


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("store", help="commit log append throughput and latency")
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--body-bytes", type=int, default=1024)
    p.add_argument("--flush", choices=["SYNC_FLUSH", "ASYNC_FLUSH"], default="ASYNC_FLUSH")
    p.add_argument("--writers", type=int, default=1, help="concurrent writers")
    p.add_argument(
        "--mode",
        choices=["asyncio", "threads"],
        default="asyncio",
        help="writers as asyncio tasks on one loop (as the broker node runs) or as threads",
    )
    p.add_argument("--dir", default=None, help="store directory (default: a temp dir, removed)")
    p.add_argument("--mapped-file-size", type=int, default=1 << 30)
    p.set_defaults(func=run)


def _percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return 0
    i = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return sorted_values[i]


def run_bench(
    messages: int,
    body_bytes: int,
    flush: str,
    writers: int,
    directory: str,
    file_size: int,
    mode: str = "asyncio",
) -> dict:
    cfg = BrokerConfig(
        store_path_root_dir=directory,
        flush_disk_type=FlushDiskType[flush],
        mapped_file_size_commit_log=file_size,
    )
    store = MessageStore.open(cfg)
    store.start()
    body = os.urandom(body_bytes)
    per_writer = messages // writers
    latencies: list[list[int]] = [[] for _ in range(writers)]  # ns per append
    failures = [0] * writers
    barrier = threading.Barrier(writers + 1)

    def writer(i: int) -> None:
        lat = latencies[i]
        msg = Message("BenchTopic", body, queue_id=i % 8, properties={"TAGS": "bench"})
        put = store.put_message
        clock = time.perf_counter_ns
        ok = PutMessageStatus.PUT_OK
        barrier.wait()
        for _ in range(per_writer):
            t0 = clock()
            r = put(msg).result()
            lat.append(clock() - t0)
            if r.status is not ok:
                failures[i] += 1

    fsyncs_before = store.fsyncs
    cpu0 = time.process_time()
    if mode == "threads":
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
    else:
        elapsed = asyncio.run(_async_writers(store, body, writers, per_writer, latencies, failures))
    cpu_seconds = time.process_time() - cpu0
    fsyncs = store.fsyncs - fsyncs_before
    store.shutdown()
    all_lat = sorted(x for lat in latencies for x in lat)  # ns
    done = len(all_lat)
    return {
        "bench": "store",
        "flush": flush,
        "writers": writers,
        "mode": mode,
        "messages": done,
        "body_bytes": body_bytes,
        "failed": sum(failures),
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(done / elapsed, 1),
        "mb_per_s": round(done * body_bytes / elapsed / 1e6, 2),
        "p50_append_us": round(_percentile(all_lat, 0.50) / 1e3, 1),
        "p99_append_us": round(_percentile(all_lat, 0.99) / 1e3, 1),
        "fsyncs": fsyncs,
        "msgs_per_fsync": round(done / fsyncs, 1) if fsyncs else None,
        # the machine is shared: CPU time of this process (all threads) and the load average
        "cpu_seconds": round(cpu_seconds, 3),
        "msgs_per_cpu_s": round(done / cpu_seconds, 1) if cpu_seconds > 0 else None,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


async def _async_writers(
    store: MessageStore,
    body: bytes,
    writers: int,
    per_writer: int,
    latencies: list[list[int]],
    failures: list[int],
) -> float:
    async def writer(i: int) -> None:
        lat = latencies[i]
        msg = Message("BenchTopic", body, queue_id=i % 8, properties={"TAGS": "bench"})
        put = store.put_message_async
        clock = time.perf_counter_ns
        ok = PutMessageStatus.PUT_OK
        for _ in range(per_writer):
            t0 = clock()
            r = await put(msg)
            lat.append(clock() - t0)
            if r.status is not ok:
                failures[i] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(i) for i in range(writers)))
    return time.perf_counter() - t0


def run(args: argparse.Namespace) -> int:
    if args.messages <= 0 or args.writers <= 0 or args.body_bytes < 0:
        raise SystemExit("haproof bench store: --messages and --writers must be positive")
    directory = args.dir or tempfile.mkdtemp(prefix="haproof-bench-store-")
    try:
        result = run_bench(
            args.messages,
            args.body_bytes,
            args.flush,
            args.writers,
            directory,
            args.mapped_file_size,
            args.mode,
        )
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(result))
    return 0 if result["failed"] == 0 else 1
