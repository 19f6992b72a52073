"""``haproof archive prune --root ROOT --cluster C [--broker-name B] --before T``.

Deletes archived history older than ``T`` (see :mod:`broker.archive.retention`): whole chunks,
snapshots and events, after writing each group's retention marker, which the audit reads to
report that history as ``expired``. ``T`` is an ISO 8601 UTC time (``2026-01-31T00:00:00Z``) or
Unix epoch milliseconds. Exit 0 when done, 2 on unusable input (a bad time, a root without that
cluster), 1 when the archive fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from broker.archive import retention
from contracts import archive_layout as layout
from contracts.errors import ArchiveError
from contracts.object_store import open_store


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="haproof archive prune",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--root", required=True, help="archive root: s3://bucket/prefix or file:///dir")
    p.add_argument("--cluster", required=True)
    p.add_argument("--broker-name", default=None, help="one group (default: every group)")
    p.add_argument("--before", required=True, help="ISO 8601 UTC time or epoch milliseconds")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    p.add_argument(
        "--unaudited",
        action="store_true",
        help="also prune history no passing audit has verified (default: keep it)",
    )
    return p


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds from ``text`` (digits, or ISO 8601 with a zone); ValueError if not."""
    if text.isdigit():
        return int(text)
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"{text!r} names no time zone (add Z for UTC)")
    return int(when.astimezone(UTC).timestamp() * 1000)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        before_ms = parse_time_ms(args.before)
    except ValueError as exc:
        print(f"haproof archive prune: --before: {exc}", file=sys.stderr)
        return 2
    try:
        for name in (args.cluster, args.broker_name or "x"):
            layout.check_name("name", name)
        store = open_store(args.root, endpoint_url=args.endpoint_url)
        prefix = layout.cluster_prefix(args.cluster)
        names = (
            [args.broker_name]
            if args.broker_name
            else [p[len(prefix) :].rstrip("/") for p in store.list_prefixes(prefix)]
        )
        if not names:
            print(
                f"haproof archive prune: no cluster {args.cluster!r} under {args.root}",
                file=sys.stderr,
            )
            return 2
        for name in names:
            res = retention.prune_group(
                store,
                args.cluster,
                name,
                before_ms,
                unaudited=args.unaudited,
                dry_run=args.dry_run,
            )
            print(
                json.dumps(
                    {
                        "brokerName": name,
                        "before": res.horizon.before_ms,
                        "dryRun": args.dry_run,
                        "deleted": res.deleted,
                        "keptUnaudited": res.kept_unaudited,
                        "expiredBelow": res.horizon.expired_below,
                    }
                )
            )
    except layout.LayoutError as exc:
        print(f"haproof archive prune: {exc}", file=sys.stderr)
        return 2
    except ArchiveError as exc:
        print(f"haproof archive prune: {exc}", file=sys.stderr)
        return 1
    return 0
