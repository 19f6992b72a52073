"""``haproof audit``: run the Spark audit and print the verdict.

Exit 0 when every check passes, 1 when one fails, 2 on a usage or input error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from broker.archive.object_store import StoreSpec
from broker.errors import ArchiveError, AuditInputError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("audit", help="audit an archive: replicas, durability, offsets")
    p.add_argument("--root", required=True, help="archive root: s3://bucket/prefix or file:///x")
    p.add_argument("--cluster", required=True)
    p.add_argument("--broker-name", default=None, help="one group (default: every group)")
    p.add_argument("--since", default=None, help="ISO-8601 time or epoch ms")
    p.add_argument("--until", default=None, help="ISO-8601 time or epoch ms")
    p.add_argument(
        "--incremental",
        action="store_true",
        help="check only what is new since the verified watermarks (_audit/state.json)",
    )
    p.add_argument("--spark-master", default=None, help="local[*], spark://host:7077, sc://...")
    p.add_argument("--run-id", default=None)
    p.add_argument("--max-lag-bytes", type=int, default=256 * 1024 * 1024)
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument(
        "--no-expectations",
        action="store_true",
        help="skip the data-quality suites (GX) that run after the Spark jobs",
    )
    p.add_argument("--json", action="store_true", help="the verdict document on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="show third-party log output")
    p.set_defaults(func=run)


def parse_time(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise AuditInputError(f"{what} {value!r} is neither epoch ms nor ISO-8601") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def run_expectations(spec: StoreSpec, summary: dict, max_lag_bytes: int) -> dict[str, dict]:
    """The GX suites over each audited group's tables: {brokerName: {success, report, failed}}."""
    from expectations import run_suites

    store = spec.open()
    out = {}
    for v in summary["groupVerdicts"]:
        name = v["brokerName"]
        print(f"haproof audit: {name}: running the expectations suites", file=sys.stderr)
        report = run_suites(store, summary["runId"], name, {"max_lag_bytes": max_lag_bytes})
        out[name] = {
            "success": report.success,
            "report": f"{store.root.rstrip('/')}/{report.report_key}",
            "failed": [s.suite for s in report.suites if not s.success],
        }
    return out


def publish_reports(spec: StoreSpec, summary: dict) -> dict[str, str]:
    """The evidence report (report.html) of every audited group: {brokerName: its URL}."""
    from expectations.evidence import build_and_publish_report

    store = spec.open()
    root = store.root.rstrip("/")
    return {
        v[
            "brokerName"
        ]: f"{root}/{build_and_publish_report(store, summary['runId'], v['brokerName'])}"
        for v in summary["groupVerdicts"]
    }


def print_table(summary: dict, gx: dict[str, dict] | None = None) -> None:
    gx = gx or {}
    for v in summary["groupVerdicts"]:
        print(f"{v['cluster']}/{v['brokerName']}  master {v['master']}  run {v['runId']}")
        for c in v["checks"]:
            mark = "PASS" if c["passed"] else "FAIL"
            print(f"  {mark}  {c['name']:<26} findings {c['findings']:<6} {c.get('detail', '')}")
        counts = ", ".join(f"{k} {n}" for k, n in sorted(v["counts"].items()))
        print(f"  ranges: {counts or 'none'}")
        g = gx.get(v["brokerName"])
        if g is not None:
            mark = "PASS" if g["success"] else "FAIL"
            failed = ", ".join(g["failed"]) or "none failed"
            print(f"  {mark}  {'expectations':<26} {failed}")
            print(f"  report: {g['report']}")
    passed = summary["passed"] and all(g["success"] for g in gx.values())
    print("PASSED" if passed else "FAILED")


def run(args: argparse.Namespace) -> int:
    from expectations.terminal import quiet_third_party
    from spark_jobs.audit import AuditOptions, run_audit

    quiet_third_party(getattr(args, "verbose", False))
    from spark_jobs.session import get_spark

    opts = AuditOptions(
        spec=StoreSpec(args.root, endpoint_url=args.endpoint_url),
        cluster=args.cluster,
        broker_name=args.broker_name,
        since_ms=parse_time(args.since, "--since"),
        until_ms=parse_time(args.until, "--until"),
        run_id=args.run_id,
        max_lag_bytes=args.max_lag_bytes,
        incremental=args.incremental,
    )
    try:
        opts.spec.open()
    except ArchiveError as exc:
        raise AuditInputError(f"cannot open archive root {args.root}: {exc}") from exc
    spark = get_spark("haproof-audit", args.spark_master)
    try:
        summary = run_audit(spark, opts)
    except ArchiveError as exc:
        raise AuditInputError(str(exc)) from exc
    finally:
        spark.stop()
    gx = None
    if not args.no_expectations:
        from expectations.report import ExpectationsError

        try:
            gx = run_expectations(opts.spec, summary, args.max_lag_bytes)
        except ExpectationsError as exc:
            raise AuditInputError(f"expectations suites: {exc}") from exc
    reports = publish_reports(opts.spec, summary)
    if getattr(args, "json", False):
        doc = {k: v for k, v in summary.items() if k != "groupVerdicts"}  # (one group: itself)
        if len(summary["groupVerdicts"]) > 1:
            doc["groupVerdicts"] = summary["groupVerdicts"]
        print(json.dumps({**doc, "reports": reports, "expectations": gx}, default=str, indent=2))
    else:
        print_table(summary, gx)
        for name, url in reports.items():
            print(f"{name}: evidence report: {url}")
    sys.stdout.flush()
    passed = summary["passed"] and all(g["success"] for g in (gx or {}).values())
    return 0 if passed else 1
