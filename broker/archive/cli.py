"""``haproof archive``: ship a store directory (ours or a real RocketMQ broker's) to the archive.

Once, or ``--follow`` to keep shipping as the log grows (a range is shipped one round after it was
first seen written, so a record a live broker is still copying is never read half-written). Each run also writes a snapshot built
from the store's ``config/`` (consumer and delay offsets) and the queue max offsets it saw, and a
``started`` event the first time a node is shipped. Exit 0 on success; 1 when the log is corrupt
(what was before the corruption is shipped) or the archive fails (missing bucket, denied access,
unreachable endpoint after bounded retries, a conflicting object); 2 on a usage error (bad
arguments, no such store directory, unsupported root).

A body CRC mismatch is record-aligned, so it is shipped as is with a warning (the audit flags it
at its exact offset); structural corruption (bad magic, size chaining) stops the ship before it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from urllib.parse import urlparse

from broker.archive.offsets_watch import OffsetsWatch
from broker.archive.shipper import NodeIdentity, Shipper, ShipResult
from broker.archive.sources import StoreDirSource
from broker.store.consumer_offsets import ConsumerOffsetManager
from broker.store.delay_offsets import DelayOffsetTable
from contracts import archive_layout as layout
from contracts.errors import ArchiveError, ConfigError, StoreError
from contracts.object_store import DEFAULT_PART_SIZE, open_store

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "archive",
        help="ship a store directory to object storage",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--store-dir", required=True, help="store root (with commitlog/ and config/)")
    p.add_argument("--root", required=True, help="archive root: s3://bucket/prefix or file:///dir")
    p.add_argument("--cluster", required=True)
    p.add_argument("--broker-name", required=True)
    p.add_argument("--node", required=True, help="stable node name")
    p.add_argument("--broker-id", type=int, default=0)
    p.add_argument("--role", default="ASYNC_MASTER", choices=list(layout.ROLES))
    p.add_argument("--epoch", type=int, default=0)
    p.add_argument("--mapped-file-size", type=int, default=None, help="default: from the files")
    p.add_argument("--chunk-max-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument(
        "--part-size-bytes",
        type=int,
        default=DEFAULT_PART_SIZE,
        help="S3 multipart part size (min 5 MiB); larger chunks are uploaded in parts",
    )
    p.add_argument("--follow", action="store_true", help="keep shipping as the log grows")
    p.add_argument("--interval-ms", type=int, default=10_000, help="--follow cadence")
    p.set_defaults(func=run)


def build_snapshot(
    store_dir: str, identity: NodeIdentity, end: int, qmax: dict, fsize: int, previous
) -> layout.Snapshot:
    cfg = os.path.join(store_dir, "config")
    offsets = ConsumerOffsetManager.load(os.path.join(cfg, "consumerOffset.json"))
    delays = DelayOffsetTable.load(os.path.join(cfg, "delayOffset.json"))
    merged: dict[str, dict[str, int]] = {}
    if previous is not None:
        for t, qs in previous.queueMaxOffsets.items():
            merged[t] = dict(qs)
    for t, qs in qmax.items():
        for q, o in qs.items():
            merged.setdefault(t, {})[q] = max(merged.get(t, {}).get(q, 0), o)
    return layout.Snapshot(
        node=identity.node,
        brokerName=identity.broker_name,
        brokerId=identity.broker_id,
        role=identity.role,
        epoch=identity.epoch,
        takenAt=time.time_ns() // 1_000_000,
        maxPhyOffset=end,
        flushedOffset=end,
        confirmOffset=end,
        slaves={},
        consumerOffsets={k: {str(q): o for q, o in v.items()} for k, v in offsets.table.items()},
        queueMaxOffsets=merged,
        delayOffsets={str(k): v for k, v in delays.table.items()},
        dataVersion=offsets.data_version,
        mappedFileSize=fsize,
    )


def _human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _progress(done: int, total: int) -> None:
    pct = 100.0 * done / total if total else 100.0
    print(
        f"\rhaproof archive: shipped {_human(done)} of {_human(total)} ({pct:.0f}%)",
        end="",
        file=sys.stderr,
        flush=True,
    )


def ship_once(shipper: Shipper, source: StoreDirSource, store_dir: str, first: bool) -> ShipResult:
    result = shipper.ship(source)
    if result.chunks:
        print(file=sys.stderr)
    if first:
        shipper.put_event("started")
    snap = build_snapshot(
        store_dir,
        shipper.id,
        result.end,
        result.queue_max_offsets,
        source.mapped_file_size,
        shipper.latest_snapshot(),
    )
    shipper.put_snapshot(snap)
    return result


def check_file_root(root: str) -> None:
    """A ``file://`` root (or bare path) must exist or be creatable, and be writable: an
    ArchiveError naming it otherwise (exit 2 before anything is read)."""
    parsed = urlparse(root)
    if parsed.scheme not in ("file", ""):
        return
    path = os.path.abspath(parsed.path if parsed.scheme == "file" else root)
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".haproof-write-probe-{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as exc:
        raise ArchiveError(
            f"archive root {root}: cannot create or write {exc.filename or path}: {exc.strerror}"
        ) from exc


def check_names(args: argparse.Namespace) -> None:
    """--cluster, --broker-name and --node become archive path components: checked before
    anything is opened (ConfigError: one line, exit 2)."""
    names = (
        ("--cluster", args.cluster),
        ("--broker-name", args.broker_name),
        ("--node", args.node),
    )
    for flag, value in names:
        try:
            layout.check_name(flag, value)
        except layout.LayoutError as exc:
            raise ConfigError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    check_names(args)
    check_file_root(args.root)
    source = StoreDirSource.open(args.store_dir, args.mapped_file_size)
    store = open_store(args.root, endpoint_url=args.endpoint_url, part_size=args.part_size_bytes)
    identity = NodeIdentity(
        args.cluster, args.broker_name, args.node, args.broker_id, args.role, args.epoch
    )
    shipper = Shipper(store, identity, args.chunk_max_bytes, progress=_progress)
    try:
        return _ship(args, shipper, source)
    except ArchiveError as exc:
        print(f"haproof archive: failed: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the root became unwritable (or full) while shipping
        where = exc.filename or args.root
        print(f"haproof archive: failed: cannot write {where}: {exc.strerror}", file=sys.stderr)
        return 1
    finally:
        source.close()


def _ship(args: argparse.Namespace, shipper: Shipper, source: StoreDirSource) -> int:
    identity = shipper.id
    first = shipper.archived_end() is None
    stop = threading.Event()
    if args.follow:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    code = 0
    seen: int | None = None  # --follow: where the log was seen written last round
    last: list = [None]  # the newest round's result (a snapshot between rounds needs it)
    watch = OffsetsWatch(args.store_dir, lambda: _snapshot_now(shipper, source, args, last[0]))
    while True:
        try:
            if args.follow:
                # ship only what was already written a round earlier (a live writer may be
                # copying the newest record right now): the first round ships nothing new
                source.refresh()
                if seen is None:
                    archived = shipper.archived_end()
                    seen = source.min_offset() if archived is None else archived
                source.cap = seen
                seen = source.written_end(seen)
            result = ship_once(shipper, source, args.store_dir, first)
        except ArchiveError as exc:
            if not args.follow:
                raise
            log.error("archive round failed (retrying): %s", exc)
            result = None
        if result is not None:
            first = False  # the started event is written
            last[0] = result
        if result is not None:
            print(
                f"haproof archive: node {identity.node}: {len(result.chunks)} new chunk(s), "
                f"{result.bytes_shipped} bytes, archive now ends at {result.end}"
                + (
                    f"; {len(result.crc_failures)} record(s) fail their CRC"
                    if result.crc_failures
                    else ""
                ),
                file=sys.stderr,
            )
            if result.stopped_by is not None:
                said = f"; recorded as {result.damage_event}" if result.damage_event else ""
                print(
                    f"haproof archive: stopped at corrupt data: {result.stopped_by}{said}",
                    file=sys.stderr,
                )
                code = 1
        if not args.follow or watch.wait(stop, args.interval_ms):
            break
    return code


def _snapshot_now(shipper: Shipper, source: StoreDirSource, args, result) -> None:
    """A snapshot between rounds (consumerOffset.json changed); after the first round only."""
    if result is None:
        return
    try:
        snap = build_snapshot(
            args.store_dir,
            shipper.id,
            result.end,
            result.queue_max_offsets,
            source.mapped_file_size,
            shipper.latest_snapshot(),
        )
        shipper.put_snapshot(snap)
    except (ArchiveError, StoreError) as exc:  # the next round's snapshot is the retry
        log.error("snapshot after a consumerOffset.json change failed: %s", exc)
