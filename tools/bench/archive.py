"""``haproof bench archive``: ship a store directory to the embedded S3 server, MB/s, one JSON line.

``--with-broker`` instead measures archiving inside a live broker (``tools/bench/archive_live.py``).

Writes ``--messages`` records with our own store into a temp directory (or ships ``--store-dir``
as is), starts the embedded moto S3 server, and times one full ship (record validation, chunk
cutting, multipart uploads, manifests) plus an idempotent re-run (list + last manifest only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import uuid

from broker.archive.shipper import NodeIdentity, Shipper
from broker.archive.sources import StoreDirSource
from contracts.object_store import open_store
from tools.s3server import S3Server


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("archive", help="store-dir ship throughput to the embedded S3")
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--body-bytes", type=int, default=1024)
    p.add_argument("--mapped-file-size", type=int, default=16 * 1024 * 1024)
    p.add_argument("--chunk-max-bytes", type=int, default=8 * 1024 * 1024)
    p.add_argument("--store-dir", default=None, help="ship this store as is (no writing)")
    p.add_argument(
        "--with-broker",
        action="store_true",
        help="live broker processes under a 1 KiB async load, archiving off then on",
    )
    p.add_argument("--producers", type=int, default=16, help="--with-broker: async producers")
    p.add_argument("--seconds", type=float, default=10.0, help="--with-broker: load per mode")
    p.add_argument("--archive-interval-ms", type=int, default=1000, help="--with-broker/store")
    p.add_argument("--rounds", type=int, default=4, help="--with-broker: off/on pairs (ABBA)")
    p.add_argument(
        "--work-dir",
        default=None,
        help="--with-broker: where the brokers' stores go (default /dev/shm if present)",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="--with-broker: also run archiving off while another process uploads as much",
    )
    p.add_argument(
        "--archive-to",
        choices=("s3", "file"),
        default="s3",
        help="--with-broker: the embedded S3 server (default), or a file:// root beside the "
        "brokers' stores: archiving with no S3 server on the same cores",
    )
    p.add_argument(
        "--with-store",
        action="store_true",
        help="the node archiver over an in-process store appending --rate-mb-s (no network)",
    )
    p.add_argument("--rate-mb-s", type=float, default=20.0, help="--with-store append rate")
    p.set_defaults(func=run)


def _write_store(directory: str, messages: int, body_bytes: int, file_size: int) -> None:
    from broker.config import BrokerConfig
    from broker.store.message_store import MessageStore
    from contracts.record.model import Message

    cfg = BrokerConfig(store_path_root_dir=directory, mapped_file_size_commit_log=file_size)
    store = MessageStore.open(cfg)
    store.start()
    body = os.urandom(body_bytes)
    futures = [
        store.put_message(Message("BenchTopic", body, queue_id=i % 8)) for i in range(messages)
    ]
    for f in futures:
        f.result()
    store.shutdown()


def run_bench(store_dir: str, chunk_max_bytes: int, file_size: int | None) -> dict:
    with S3Server.start() as server:
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        server.create_bucket(bucket)
        archive = open_store(f"s3://{bucket}/archive", **server.store_options())
        ident = NodeIdentity("bench", "broker-a", "bench-0")
        shipper = Shipper(archive, ident, chunk_max_bytes=chunk_max_bytes)
        source = StoreDirSource.open(store_dir, file_size)
        t0 = time.perf_counter()
        result = shipper.ship(source)
        elapsed = time.perf_counter() - t0
        t1 = time.perf_counter()
        again = shipper.ship(source)
        rerun_s = time.perf_counter() - t1
        source.close()
    shipped = result.bytes_shipped
    return {
        "bench": "archive",
        "bytes": shipped,
        "chunks": len(result.chunks),
        "chunk_max_bytes": chunk_max_bytes,
        "seconds": round(elapsed, 3),
        "mb_per_s": round(shipped / elapsed / 1e6, 2) if elapsed > 0 else None,
        "rerun_new_chunks": len(again.chunks),
        "rerun_seconds": round(rerun_s, 3),
        "crc_failures": len(result.crc_failures),
        "cpus": os.cpu_count(),
    }


def run(args: argparse.Namespace) -> int:
    if args.with_store:
        from tools.bench.archive_store import run_with_store

        figures = run_with_store(
            args.rate_mb_s,
            args.body_bytes,
            args.seconds,
            args.archive_interval_ms,
            args.chunk_max_bytes,
        )
        print(json.dumps(figures))
        return 0 if figures["ok"] else 1
    if args.with_broker:
        from tools.bench.archive_live import default_work_root, run_with_broker

        figures = run_with_broker(
            args.producers,
            args.body_bytes,
            args.seconds,
            args.archive_interval_ms,
            args.chunk_max_bytes,
            args.rounds,
            args.work_dir or default_work_root(),
            args.control,
            args.archive_to,
        )
        print(json.dumps(figures))
        return 0 if figures["ok"] else 1
    if args.store_dir:
        print(json.dumps(run_bench(args.store_dir, args.chunk_max_bytes, None)))
        return 0
    if args.messages <= 0 or args.body_bytes < 0:
        raise SystemExit("haproof bench archive: --messages must be positive")
    directory = tempfile.mkdtemp(prefix="haproof-bench-archive-")
    try:
        _write_store(directory, args.messages, args.body_bytes, args.mapped_file_size)
        print(json.dumps(run_bench(directory, args.chunk_max_bytes, args.mapped_file_size)))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0
