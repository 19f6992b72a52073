"""Task bodies shared by the haproof DAGs (not a DAG file: listed in .airflowignore).

Each function is small, takes and returns plain JSON-able values (they travel as XComs), and
imports nothing of the project (nor Spark, GX, boto3) until a task runs, so parsing a DAG file
stays cheap and cannot fail on the project's code.

Configuration, in order: the DAG run's params, then the environment (``HAPROOF_ARCHIVE_ROOT``,
``HAPROOF_CLUSTER``, ``HAPROOF_SPARK_MASTER``, ``HAPROOF_S3_ENDPOINT``), then defaults.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)


class AuditConfigError(ValueError):
    """A DAG run was started without what it needs (no archive root, no cluster...)."""


def base_params(*, require_evidence: bool) -> dict:
    """The params every haproof audit DAG takes (each DAG adds its own); ``require_evidence``
    is the DAG's default for a check that had nothing to judge (fail, or report and pass)."""
    from airflow.sdk import Param

    def text(description: str) -> Param:
        return Param(None, type=["null", "string"], description=description)

    return {
        "root": text("archive root: s3://bucket/prefix or file:///path"),
        "cluster": text("cluster name in the archive"),
        "spark_master": text("local[*] (default), spark://host:7077 or sc://host"),
        "endpoint_url": text("S3 endpoint (MinIO, moto...); default AWS / HAPROOF_S3_ENDPOINT"),
        "max_lag_bytes": Param(
            None,
            type=["null", "integer"],
            minimum=0,
            description="bytes a slave may lag its master; empty: the audit's default "
            "(contracts.audit_tables.DEFAULT_MAX_LAG_BYTES)",
        ),
        "require_evidence": Param(
            require_evidence,
            type="boolean",
            description="a check with nothing to judge (NO_EVIDENCE) fails the run",
        ),
    }


def resolve_config(params: dict[str, Any], *, incremental: bool) -> dict[str, Any]:
    """The run's :class:`pipeline.steps.PipelineConfig` (as JSON, for XComs) from its params,
    then the environment, then defaults."""
    from contracts.audit_tables import DEFAULT_MAX_LAG_BYTES
    from contracts.errors import AuditInputError
    from pipeline.steps import PipelineConfig

    def pick(name: str, env: str, default=None):
        value = params.get(name)
        if value in (None, ""):
            value = os.environ.get(env) or default
        return value

    missing = [
        k for k, env in (("root", "HAPROOF_ARCHIVE_ROOT"), ("cluster", "HAPROOF_CLUSTER"))
        if not pick(k, env)
    ]  # fmt: skip
    if missing:
        raise AuditConfigError(
            f"the DAG run needs {' and '.join(missing)}: pass them as params "
            "(--conf / trigger form) or set HAPROOF_ARCHIVE_ROOT / HAPROOF_CLUSTER"
        )
    try:
        cfg = PipelineConfig(
            root=pick("root", "HAPROOF_ARCHIVE_ROOT"),
            cluster=pick("cluster", "HAPROOF_CLUSTER"),
            broker_name=params.get("broker_name") or None,
            since=params.get("since") or None,
            until=params.get("until") or None,
            spark_master=pick("spark_master", "HAPROOF_SPARK_MASTER", "local[*]"),
            endpoint_url=pick("endpoint_url", "HAPROOF_S3_ENDPOINT"),
            max_lag_bytes=int(
                params.get("max_lag_bytes")
                if params.get("max_lag_bytes") is not None
                else DEFAULT_MAX_LAG_BYTES
            ),
            incremental=bool(params.get("incremental", incremental)),
            require_evidence=bool(params.get("require_evidence", incremental)),
        )
    except AuditInputError as exc:
        raise AuditConfigError(str(exc)) from exc
    return cfg.to_json()


def audit_pipeline(*, incremental: bool) -> None:
    """resolve → audit (Spark) → expectations (GX) → publish, inside the calling ``@dag``: the
    steps of :mod:`pipeline.steps`, the same ``haproof audit`` runs. publish fails the run
    (AirflowFailException: no retry) when a check or a suite failed, or a check had no
    evidence while ``require_evidence`` (default on) is set."""
    from airflow.sdk import task
    from haproof_report_link import report_task, share_report_url

    @task
    def resolve(params=None) -> dict:
        return resolve_config(params or {}, incremental=incremental)

    @task(retries=0)
    def audit(cfg: dict) -> dict:
        from pipeline.steps import PipelineConfig, audit_step, compact

        return compact(audit_step(PipelineConfig.from_json(cfg)))

    @task
    def expectations(cfg: dict, summary: dict) -> list:
        from pipeline.steps import PipelineConfig, expectations_step

        return expectations_step(PipelineConfig.from_json(cfg), summary)

    @report_task(retries=0)  # @task with the "Audit report" extra link
    def report(cfg: dict, summary: dict, gx: list) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from pipeline.steps import PipelineConfig, publish_step, report_step

        config = PipelineConfig.from_json(cfg)
        reports = report_step(config, summary)
        share_report_url(reports, summary, gx)
        doc = publish_step(config, summary, gx, reports)
        for r in gx:
            log.info("data-quality report for %s: %s", r["brokerName"], r["reportUrl"])
        if not doc["passed"]:
            raise AirflowFailException(
                f"audit {doc['runId']} {doc['status']}: see "
                f"{', '.join(doc['reports'].values()) or doc['root'] + '/' + doc['key']}"
            )
        return doc

    cfg = resolve()
    summary = audit(cfg)
    report(cfg, summary, expectations(cfg, summary))
