"""``haproof store dump STORE_DIR``: decode a store directory (ours or RocketMQ's) as JSON lines."""

from __future__ import annotations

import argparse
import json
import os
import sys

from contracts.errors import CorruptRecordError, StoreError
from contracts.fastjson import loads_fastjson
from contracts.record.reader import record_to_json, scan_records

CONFIG_FILES = ("consumerOffset.json", "topics.json", "delayOffset.json", "subscriptionGroup.json")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("store", help="inspect store directories")
    sub = p.add_subparsers(dest="store_command", metavar="SUBCOMMAND")
    d = sub.add_parser(
        "dump",
        help="decode a commit log as JSON lines",
        description="Print one JSON line per commit log record (BLANK fillers included). "
        "Exit 1 when a record is corrupt (the message names file, offset and reason).",
    )
    d.add_argument("store_dir", metavar="STORE_DIR", help="store root, commitlog dir, or one file")
    d.add_argument("--from-offset", type=int, default=0, help="skip records before this offset")
    d.add_argument("--config", action="store_true", help="also print the config/*.json files")
    d.set_defaults(func=run_dump)
    r = sub.add_parser(
        "repair",
        help="quarantine damaged commit log ranges, keep every valid record",
        description="Walk the whole commit log (magic, chaining, body CRC). Each damaged range "
        "followed by valid records is copied to STORE_DIR/quarantine/{start}-{end}.bin and "
        "filled so the log chains again; nothing valid is deleted. A torn tail is left for the "
        "broker's recovery. The broker must be stopped. Exit 0 repaired or clean, 1 damage "
        "found with --dry-run, 2 unusable input.",
    )
    r.add_argument("store_dir", metavar="STORE_DIR", help="store root (with commitlog/)")
    r.add_argument("--dry-run", action="store_true", help="report only, change nothing")
    r.set_defaults(func=run_repair)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def commit_log_files(path: str) -> list[tuple[str, int]]:
    """(path, start offset) of each commit log file under ``path``, in order."""
    if os.path.isfile(path):
        name = os.path.basename(path)
        digits = name[-20:]
        if not digits.isdigit():
            raise StoreError(f"{path}: not a commit log file (name must end in 20 digits)")
        return [(path, int(digits))]
    if not os.path.isdir(path):
        raise StoreError(f"{path}: no such file or directory")
    cl = os.path.join(path, "commitlog")
    directory = cl if os.path.isdir(cl) else path
    files = [
        (os.path.join(directory, n), int(n))
        for n in sorted(os.listdir(directory))
        if len(n) == 20 and n.isdigit()
    ]
    if not files:
        raise StoreError(f"{directory}: no commit log files (20-digit names)")
    return files


def iter_dump(path: str, from_offset: int = 0):
    """Yield record dicts; raise CorruptRecordError / StoreError on structural corruption: a
    file missing between two others, or records that stop (a zero-filled page, a torn record)
    where later bytes of the same file or later files hold data. The dump never ends early
    with exit 0."""
    files = commit_log_files(path)
    expected = None
    for i, (fpath, start) in enumerate(files):
        if expected is not None and start != expected:
            raise CorruptRecordError(
                fpath, expected, f"the log has a hole: no file holds [{expected}, {start})"
            )
        with open(fpath, "rb") as fh:
            data = fh.read()
        expected = start + len(data)
        if not data:
            continue
        end = start
        for rec in scan_records(data, base_offset=start, source=fpath):
            end = rec.end
            if rec.end > from_offset:
                yield rec
        stop = end - start
        if stop < len(data) and data.count(0, stop) != len(data) - stop:
            raise CorruptRecordError(
                fpath, end, "records stop here, but later bytes of this file hold data"
            )
        later_data = any(os.path.getsize(p) for p, _ in files[i + 1 :])
        if end < start + len(data) and later_data:
            raise CorruptRecordError(
                fpath,
                end,
                "data stops before the file end without a BLANK record, but later files hold data",
            )


def run_repair(args: argparse.Namespace) -> int:
    from broker.store.repair import repair

    report = repair(args.store_dir, dry_run=args.dry_run)
    for i, d in enumerate(report.damages):
        done = f"quarantined into {report.quarantined[i]}" if not args.dry_run else "not changed"
        print(f"haproof store repair: {d.describe()}: {done}")
    if report.torn_tail is not None:
        lo, hi = report.torn_tail
        print(f"haproof store repair: torn tail [{lo}, {hi}) left for recovery to drop")
    if not report.damages:
        print(f"haproof store repair: {args.store_dir}: no damaged range (log ends at "
              f"{report.log_end})")  # fmt: skip
    return 1 if args.dry_run and report.damages else 0


def run_dump(args: argparse.Namespace) -> int:
    out = sys.stdout
    bad_crc = 0
    count = 0
    try:
        for rec in iter_dump(args.store_dir, args.from_offset):
            doc = record_to_json(rec)
            out.write(json.dumps(doc, ensure_ascii=False) + "\n")
            count += 1
            if not rec.crc_ok:
                bad_crc += 1
                print(
                    f"haproof store dump: body CRC mismatch at offset {rec.physical_offset} "
                    f"(topic {rec.topic}, queue {rec.queue_id}, queue offset {rec.queue_offset})",
                    file=sys.stderr,
                )
    except CorruptRecordError as exc:
        out.flush()
        print(f"haproof store dump: {exc}", file=sys.stderr)
        return 1
    if args.config:
        root = args.store_dir if os.path.isdir(args.store_dir) else os.path.dirname(args.store_dir)
        for name in CONFIG_FILES:
            path = os.path.join(root, "config", name)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as fh:
                    doc = loads_fastjson(fh.read(), path)
                out.write(json.dumps({"config": name, "content": doc}) + "\n")
    if bad_crc:
        print(f"haproof store dump: {bad_crc} of {count} records fail their CRC", file=sys.stderr)
        return 1
    return 0
