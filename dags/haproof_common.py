"""Task bodies shared by the haproof DAGs (not a DAG file: listed in .airflowignore).

Each function is small, takes and returns plain JSON-able values (they travel as XComs), and
imports Spark, GX and boto3 only when called, so parsing a DAG file stays cheap.

Configuration, in order: the DAG run's params, then the environment (``HAPROOF_ARCHIVE_ROOT``,
``HAPROOF_CLUSTER``, ``HAPROOF_SPARK_MASTER``, ``HAPROOF_S3_ENDPOINT``), then defaults.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

log = logging.getLogger(__name__)


class AuditConfigError(ValueError):
    """A DAG run was started without what it needs (no archive root, no cluster...)."""


def base_params() -> dict:
    """The params every haproof audit DAG takes (each DAG adds its own)."""
    from airflow.sdk import Param

    def text(description: str) -> Param:
        return Param(None, type=["null", "string"], description=description)

    return {
        "root": text("archive root: s3://bucket/prefix or file:///path"),
        "cluster": text("cluster name in the archive"),
        "spark_master": text("local[*] (default), spark://host:7077 or sc://host"),
        "endpoint_url": text("S3 endpoint (MinIO, moto...); default AWS / HAPROOF_S3_ENDPOINT"),
        "max_lag_bytes": Param(256 * 1024 * 1024, type="integer", minimum=0),
    }


def resolve_config(params: dict[str, Any], *, incremental: bool) -> dict[str, Any]:
    def pick(name: str, env: str, default=None):
        value = params.get(name)
        if value in (None, ""):
            value = os.environ.get(env) or default
        return value

    cfg = {
        "root": pick("root", "HAPROOF_ARCHIVE_ROOT"),
        "cluster": pick("cluster", "HAPROOF_CLUSTER"),
        "broker_name": params.get("broker_name") or None,
        "since": params.get("since") or None,
        "until": params.get("until") or None,
        "spark_master": pick("spark_master", "HAPROOF_SPARK_MASTER", "local[*]"),
        "endpoint_url": pick("endpoint_url", "HAPROOF_S3_ENDPOINT"),
        "max_lag_bytes": int(params.get("max_lag_bytes") or 256 * 1024 * 1024),
        "incremental": bool(params.get("incremental", incremental)),
    }
    missing = [k for k in ("root", "cluster") if not cfg[k]]
    if missing:
        raise AuditConfigError(
            f"the DAG run needs {' and '.join(missing)}: pass them as params "
            "(--conf / trigger form) or set HAPROOF_ARCHIVE_ROOT / HAPROOF_CLUSTER"
        )
    return cfg


def _spec(cfg: dict[str, Any]):
    from broker.archive.object_store import StoreSpec

    return StoreSpec(cfg["root"], endpoint_url=cfg["endpoint_url"])


def run_audit(cfg: dict[str, Any], run_id: str | None = None) -> dict[str, Any]:
    """The Spark jobs; returns the run's summary without the per-finding detail."""
    from spark_jobs.audit import AuditOptions
    from spark_jobs.audit import run_audit as spark_audit
    from spark_jobs.cli import parse_time
    from spark_jobs.session import get_spark

    opts = AuditOptions(
        spec=_spec(cfg),
        cluster=cfg["cluster"],
        broker_name=cfg["broker_name"],
        since_ms=parse_time(cfg["since"], "since"),
        until_ms=parse_time(cfg["until"], "until"),
        run_id=run_id,
        max_lag_bytes=cfg["max_lag_bytes"],
        incremental=cfg["incremental"],
    )
    spark = get_spark("haproof-audit-dag", cfg["spark_master"])
    try:
        summary = spark_audit(spark, opts)
    finally:
        spark.stop()
    groups = [
        {
            "brokerName": v["brokerName"],
            "passed": v["passed"],
            "master": v.get("master"),
            "checks": [
                {"name": c["name"], "passed": c["passed"], "findings": c["findings"]}
                for c in v["checks"]
            ],
        }
        for v in summary["groupVerdicts"]
    ]
    for g in groups:
        log.info(
            "audit %s/%s: %s (%s)",
            cfg["cluster"],
            g["brokerName"],
            "PASSED" if g["passed"] else "FAILED",
            ", ".join(f"{c['name']} {c['findings']}" for c in g["checks"]),
        )
    return {"runId": summary["runId"], "passed": summary["passed"], "groups": groups}


def run_expectations(cfg: dict[str, Any], audit: dict[str, Any]) -> list[dict[str, Any]]:
    """The GX suites over every audited group; the report lands beside the audit outputs."""
    from expectations import run_suites

    store = _spec(cfg).open()
    params = {"max_lag_bytes": cfg["max_lag_bytes"]}
    out = []
    for g in audit["groups"]:
        report = run_suites(store, audit["runId"], g["brokerName"], params)
        out.append(
            {
                "brokerName": g["brokerName"],
                "success": report.success,
                "report": report.report_key,
                "failedSuites": [s.suite for s in report.suites if not s.success],
            }
        )
    return out


def publish_reports(store, root: str, audit: dict[str, Any]) -> dict[str, str]:
    """Build each group's evidence report (report.html); its URL goes to the task's log."""
    from expectations.evidence import build_and_publish_report

    urls = {}
    for g in audit["groups"]:
        key = build_and_publish_report(store, audit["runId"], g["brokerName"])
        urls[g["brokerName"]] = f"{root.rstrip('/')}/{key}"
        log.info("evidence report for %s: %s", g["brokerName"], urls[g["brokerName"]])
    return urls


def publish(cfg: dict[str, Any], audit: dict[str, Any], gx: list[dict[str, Any]]) -> dict:
    """Write ``audits/{runId}/dag_report.json`` and say where the reports are; the caller fails
    the run when ``passed`` is false."""
    from broker.archive import layout

    store = _spec(cfg).open()
    passed = audit["passed"] and all(r["success"] for r in gx)
    doc = {
        "runId": audit["runId"],
        "cluster": cfg["cluster"],
        "passed": passed,
        "audit": audit,
        "expectations": gx,
        "root": cfg["root"],
    }
    doc["reports"] = publish_reports(store, cfg["root"], audit)
    key = layout.audit_run_prefix(audit["runId"]) + "dag_report.json"
    store.put_mutable(key, json.dumps(doc, indent=2).encode())
    for r in gx:
        log.info("data-quality report for %s: %s/%s", r["brokerName"], cfg["root"], r["report"])
    doc["key"] = key
    return doc


def audit_pipeline(*, incremental: bool) -> None:
    """resolve → audit (Spark) → expectations (GX) → publish, inside the calling ``@dag``.
    publish fails the run (AirflowFailException: no retry) when a check or a suite failed."""
    from airflow.sdk import task

    @task
    def resolve(params=None) -> dict:
        return resolve_config(params or {}, incremental=incremental)

    @task(retries=0)
    def audit(cfg: dict) -> dict:
        return run_audit(cfg)

    @task
    def expectations(cfg: dict, summary: dict) -> list:
        return run_expectations(cfg, summary)

    @task(retries=0)
    def report(cfg: dict, summary: dict, gx: list) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        doc = publish(cfg, summary, gx)
        if not doc["passed"]:
            raise AirflowFailException(
                f"audit {doc['runId']} FAILED: see {', '.join(doc['reports'].values())}"
            )
        return doc

    cfg = resolve()
    summary = audit(cfg)
    report(cfg, summary, expectations(cfg, summary))
