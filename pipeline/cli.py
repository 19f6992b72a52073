"""``haproof audit``: run the audit pipeline and print the verdict.

Exit 0 when every check passes (NO_EVIDENCE too, unless ``--require-evidence``), 1 when a check
or a suite fails, 2 on a usage or input error (an unreadable root, a bad time).
"""

from __future__ import annotations

import argparse
import json
import sys

from contracts import audit_tables as T
from pipeline import history
from pipeline.steps import PipelineConfig, run_pipeline

EXIT_CODES = """exit codes:
  0  every check passed (a check with no evidence is reported, and passes unless
     --require-evidence)
  1  a check failed, or an expectations suite failed
  2  unusable input: unreadable archive root, unknown cluster, bad --since/--until
  3  another audit holds a group's lease (_audit/lease.json; the message names its run);
     HAPROOF_AUDIT_LEASE_WAIT_S=N waits up to N seconds for it instead"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "audit",
        help="audit an archive: replicas, durability, integrity, offsets",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    p.add_argument(
        "--require-evidence",
        action="store_true",
        help="a check that had nothing to judge (NO_EVIDENCE) fails the run",
    )
    p.add_argument("--spark-master", default=None, help="local[*], spark://host:7077, sc://...")
    p.add_argument("--run-id", default=None)
    p.add_argument("--max-lag-bytes", type=int, default=T.DEFAULT_MAX_LAG_BYTES)
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument("--json", action="store_true", help="print the verdict document on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="show third-party log output")
    p.add_argument(
        "--no-expectations",
        action="store_true",
        help="skip the data-quality suites (GX) that run after the Spark jobs",
    )
    history.add_arguments(p)  # haproof audit history (pipeline/history.py)
    p.set_defaults(func=run)


_MARK = {T.STATUS_PASS: "PASS", T.STATUS_FAIL: "FAIL", T.STATUS_NO_EVIDENCE: "NO EVIDENCE"}


def print_table(summary: dict, gx: list[dict], reports: dict | None = None, out=sys.stdout) -> None:
    reports = reports or {}
    by_group = {g["brokerName"]: g for g in gx}
    for v in summary["groupVerdicts"]:
        print(f"{v['cluster']}/{v['brokerName']}  master {v['master']}  run {v['runId']}", file=out)
        for c in v["checks"]:
            mark = _MARK.get(c["status"], c["status"])
            print(
                f"  {mark:<11} {c['name']:<24} findings {c['findings']:<5} {c['detail']}", file=out
            )
        counts = ", ".join(
            f"{k} {n} ({v['bytes'].get(k, 0)} bytes)" for k, n in sorted(v["counts"].items())
        )
        print(f"  ranges: {counts or 'none'}", file=out)
        g = by_group.get(v["brokerName"])
        if g is not None:
            mark = "PASS" if g["success"] else "FAIL"
            failed = ", ".join(g["failedSuites"]) or "none failed"
            print(f"  {mark:<11} {'expectations':<24} {failed}", file=out)
            print(f"  report: {g['reportUrl']}", file=out)
        url = reports.get(v["brokerName"])
        if url:
            print(f"  evidence report: {url}", file=out)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "verb", None) == "history":
        return history.run(args)
    from expectations.terminal import quiet_third_party
    from spark_jobs.lease import LeaseBusyError

    quiet_third_party(args.verbose)
    cfg = PipelineConfig(
        root=args.root,
        cluster=args.cluster,
        broker_name=args.broker_name,
        since=args.since,
        until=args.until,
        spark_master=args.spark_master,
        endpoint_url=args.endpoint_url,
        max_lag_bytes=args.max_lag_bytes,
        incremental=args.incremental,
        require_evidence=args.require_evidence,
        expectations=not args.no_expectations,
        run_id=args.run_id,
    )
    try:
        summary, doc = run_pipeline(cfg)
    except LeaseBusyError as exc:
        print(f"haproof audit: {exc}", file=sys.stderr)
        return 3
    if args.json:
        verdict = {k: v for k, v in summary.items() if k != "groupVerdicts"}
        if summary.get("brokerName") is None:
            verdict["groupVerdicts"] = summary["groupVerdicts"]
        verdict.update(reports=doc["reports"], expectations=doc["expectations"])
        json.dump(verdict, sys.stdout, indent=2, default=str)
        print()
        print_table(summary, doc["expectations"], doc["reports"], out=sys.stderr)
    else:
        print_table(summary, doc["expectations"], doc["reports"])
    if summary["status"] == T.RUN_NO_EVIDENCE and not doc["passed"]:
        print("haproof audit: a check had nothing to judge and --require-evidence is set",
              file=sys.stderr)  # fmt: skip
    elif summary["status"] == T.RUN_PASSED and not doc["passed"]:
        print("haproof audit: an expectations suite failed", file=sys.stderr)
    # the last line is the audit's headline, as verdict.json's status says it
    print(summary["status"], file=sys.stderr if args.json else sys.stdout)
    sys.stdout.flush()
    return 0 if doc["passed"] else 1
