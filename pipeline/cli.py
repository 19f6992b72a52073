"""``haproof audit``: run the audit pipeline and print the verdict.

Exit 0 when every check passes (NO_EVIDENCE too, unless ``--require-evidence``), 1 when a check
or a suite fails, 2 on a usage or input error (an unreadable root, a bad time).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from contracts import audit_tables as T
from contracts.errors import AuditInputError
from pipeline import audit_json, history, interrupt, links, metrics, preflight
from pipeline.steps import PipelineConfig, run_pipeline
from spark_jobs import progress

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
    p.add_argument(
        "--root",
        default=os.environ.get("HAPROOF_ARCHIVE_ROOT"),
        help="archive root: s3://bucket/prefix or file:///x (default: $HAPROOF_ARCHIVE_ROOT)",
    )
    p.add_argument(
        "--cluster",
        default=os.environ.get("HAPROOF_CLUSTER"),
        help="the cluster's name in the archive (default: $HAPROOF_CLUSTER)",
    )
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
    p.add_argument(
        "--spark-master",
        default=None,
        help="local[*], spark://host:7077, sc://... (default: $HAPROOF_SPARK_MASTER or local[*])",
    )
    p.add_argument("--run-id", default=None)
    p.add_argument("--max-lag-bytes", type=int, default=T.DEFAULT_MAX_LAG_BYTES)
    for what in ("duplicated", "redelivered"):
        p.add_argument(
            f"--max-{what}",
            type=int,
            default=None,
            help=f"the delivery check fails past this many {what} messages (default: it counts)",
        )
    p.add_argument(
        "--endpoint-url",
        default=None,
        help="S3 endpoint (MinIO, moto, ...; default: $HAPROOF_S3_ENDPOINT or $AWS_ENDPOINT_URL)",
    )
    p.add_argument(
        "--report-url",
        default=os.environ.get("HAPROOF_REPORT_URL"),
        metavar="store|presign|BASE_URL",
        help="report links: the store's URL (default), a presigned HTTPS link, or a base URL "
        "serving the archive root (default: $HAPROOF_REPORT_URL)",
    )
    p.add_argument("--json", action="store_true", help="print the verdict document on stdout")
    p.add_argument(
        "--metrics-pushgateway",
        default=os.environ.get("HAPROOF_METRICS_PUSHGATEWAY"),
        metavar="URL",
        help="push the run's metrics to this Prometheus Pushgateway "
        "(default: $HAPROOF_METRICS_PUSHGATEWAY)",
    )
    p.add_argument(
        "--metrics-textfile",
        default=os.environ.get("HAPROOF_METRICS_TEXTFILE"),
        metavar="PATH",
        help="write the run's metrics for node_exporter's textfile collector "
        "(default: $HAPROOF_METRICS_TEXTFILE)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show third-party log output")
    p.add_argument(
        "--no-expectations",
        action="store_true",
        help="skip the data-quality suites (GX) that run after the Spark jobs",
    )
    history.add_arguments(p)  # haproof audit history (pipeline/history.py)
    p.set_defaults(func=run)


_MARK = {T.STATUS_PASS: "PASS", T.STATUS_FAIL: "FAIL", T.STATUS_NO_EVIDENCE: "NO EVIDENCE"}


def print_table(doc: dict, out=sys.stdout) -> None:
    """The run for a person: per group its checks (a FAIL names where its first finding is),
    the byte ranges by verdict, the expectations and the report links."""
    for g in doc["groups"]:
        print(f"{doc['cluster']}/{g['name']}  master {g['master']}  run {doc['runId']}", file=out)
        for c in g["checks"]:
            mark = _MARK.get(c["status"], c["status"])
            where = audit_json.where_text(c["first"])
            print(
                f"  {mark:<11} {c['name']:<24} findings {c['findings']:<5} {c['detail']}{where}",
                file=out,
            )
        ranges = ", ".join(
            f"{k} {r['count']} ({r['bytes']} bytes"
            + (f", {r['differingBytes']} differing)" if "differingBytes" in r else ")")
            for k, r in g["ranges"].items()
        )
        print(f"  ranges: {ranges or 'none'}", file=out)
        for line in coverage_lines(g):
            print(f"  {line}", file=out)
        gx = g["expectations"]
        if gx is not None:
            mark = "PASS" if gx["success"] else "FAIL"
            failed = ", ".join(gx["failedSuites"]) or "none failed"
            print(f"  {mark:<11} {'expectations':<24} {failed}", file=out)
            print(f"  report: {gx['reportUrl']}", file=out)
        if g["report"]:
            print(f"  evidence report: {g['report']}", file=out)


def coverage_lines(v: dict) -> list[str]:
    """What each consumer group's offset verdict stands on, and the delivery counts."""
    out = []
    for group, c in (v.get("offsets") or {}).get("groups", {}).items():
        blind = "unknown" if c["blindWindowMs"] is None else f"{c['blindWindowMs']} ms"
        queues = f" on {c['queues']} queue(s)" if c.get("queues") is not None else ""
        out.append(
            f"offsets {group}: {c['points']} {c['evidence']}{queues} over "
            f"{c['coveredToMs'] - c['coveredFromMs']} ms, blind window {blind}"
        )
    d = v.get("delivery")
    if d:
        out.append(
            f"delivery: enqueued {d['enqueued']}, duplicated {d['duplicated']}, "
            f"redelivered {d['redelivered']}, lost {d['lost']}"
        )
    return out


def config_from(args: argparse.Namespace) -> PipelineConfig:
    missing = [
        f"--{n} (or ${env})"
        for n, env in (("root", "HAPROOF_ARCHIVE_ROOT"), ("cluster", "HAPROOF_CLUSTER"))
        if not getattr(args, n)
    ]
    if missing:
        raise AuditInputError(f"give {' and '.join(missing)}")
    return PipelineConfig(
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
        max_duplicated=args.max_duplicated,
        max_redelivered=args.max_redelivered,
    )


def start_spark(cfg: PipelineConfig) -> None:
    """Start the session the audit step then reuses (``getOrCreate``), in a process session of
    its own (``pipeline/interrupt.py``), saying so: the JVM's start-up takes seconds."""
    from spark_jobs.session import get_spark

    master = cfg.spark_master or os.environ.get("HAPROOF_SPARK_MASTER") or "local[*]"
    progress.line(f"starting Spark ({master})")
    get_spark("haproof-audit", cfg.spark_master, own_session=True)
    # SparkContext installs its own SIGINT handler (cancelAllJobs over py4j, then
    # KeyboardInterrupt): a call into the gateway from inside a call to it; ours again
    interrupt.install("haproof audit")
    progress.line("Spark ready")


def require_spark() -> None:
    """The ``audit`` extra's missing Spark is said first (broker/cli.py names the extra), before
    the input is checked."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        raise ModuleNotFoundError("No module named 'pyspark'", name="pyspark")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "verb", None) == "history":
        return history.run(args)
    progress.pin()
    interrupt.install("haproof audit")
    require_spark()
    from expectations.terminal import quiet_third_party

    quiet_third_party(args.verbose)
    cfg = config_from(args)
    links.check_mode(args.report_url)
    groups = preflight.check_input(cfg.spec(), cfg.cluster, cfg.broker_name)
    progress.line(f"{cfg.root}: cluster {cfg.cluster}, {len(groups)} group(s): {', '.join(groups)}")
    start_spark(cfg)
    from spark_jobs.lease import LeaseBusyError

    try:
        summary, published = run_pipeline(cfg)
    except LeaseBusyError as exc:
        print(f"haproof audit: {exc}", file=sys.stderr)
        return 3
    published = links.relink(published, links.link_maker(cfg.spec(), args.report_url))
    doc = audit_json.audit_document(summary, published)
    metrics.publish(doc, progress.elapsed_s(), args.metrics_pushgateway, args.metrics_textfile)
    if args.json:
        json.dump(doc, sys.stdout, indent=2, default=str)
        print()
    print_table(doc, out=sys.stderr if args.json else sys.stdout)
    if summary["status"] == T.RUN_NO_EVIDENCE and not published["passed"]:
        print(
            "haproof audit: a check had nothing to judge and --require-evidence is set",
            file=sys.stderr,
        )
    elif summary["status"] == T.RUN_PASSED and not published["passed"]:
        print("haproof audit: an expectations suite failed", file=sys.stderr)
    # the last line is the audit's headline, as verdict.json's status says it
    print(summary["status"], file=sys.stderr if args.json else sys.stdout)
    sys.stdout.flush()
    return 0 if published["passed"] else 1
