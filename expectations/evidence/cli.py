"""``haproof report``: rebuild a run's evidence report(s) from the tables it wrote."""

from __future__ import annotations

import argparse
import json
import sys

from contracts.errors import ArchiveError
from contracts.object_store import StoreSpec

EPILOG = """\
exit codes:
  0  every report was written (whatever the audit's verdict: read it in the report)
  2  unusable input: bad --run or --broker-name, no outputs for the run, archive root not usable
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="rebuild an audit run's report.html from its tables (no Spark, no network)",
        description="Render audits/{runId}/{brokerName}/report.html from the run's Parquet "
        "tables, verdict.json and the group's archived snapshots and events.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--root", required=True, help="archive root: s3://bucket/prefix or file:///x")
    p.add_argument("--run", required=True, metavar="RUN_ID", help="the audit run's id")
    p.add_argument(
        "--broker-name", default=None, help="one group (default: every group of the run)"
    )
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="show third-party log output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from expectations.evidence.model import ReportInputError, list_groups
    from expectations.evidence.publish import build_report, report_key
    from expectations.terminal import quiet_third_party

    quiet_third_party(args.verbose)
    try:
        store = StoreSpec(args.root, endpoint_url=args.endpoint_url).open()
        groups = [args.broker_name] if args.broker_name else list_groups(store, args.run)
    except ArchiveError as exc:
        raise ReportInputError(f"cannot read archive root {args.root}: {exc}") from exc
    if not groups:
        raise ReportInputError(f"run {args.run!r} has no outputs under {args.root}/audits/")
    out = []
    for name in groups:
        html, stats = build_report(store, args.run, name)
        key = report_key(args.run, name)
        if stats.pop("empty"):
            raise ReportInputError(f"run {args.run!r} wrote nothing for group {name!r}")
        try:
            store.put_mutable(key, html)
        except ArchiveError as exc:
            raise ReportInputError(f"cannot write {key}: {exc}") from exc
        out.append({"brokerName": name, "report": f"{store.root.rstrip('/')}/{key}", **stats})
    if args.json:
        # docs/schemas/report.schema.json
        doc = {"schemaVersion": 1, "command": "report", "runId": args.run, "reports": out}
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        for r in out:
            missing = f", {len(r['missing'])} output(s) missing" if r["missing"] else ""
            print(f"{r['brokerName']}: {r['headline']}{missing}")
            print(f"  report: {r['report']}  ({r['bytes']:,} bytes, {r['seconds']:.2f} s)")
    return 0
