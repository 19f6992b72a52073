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


#: the suites' results when the audit task ran them (``_suites_in_audit``)
SUITES_IN_AUDIT_XCOM = "expectations_in_audit"


class AuditConfigError(ValueError):
    """A DAG run was started without what it needs (no archive root, no cluster...)."""


def base_params(*, require_evidence: bool, lease_wait_s: int) -> dict:
    """The params every haproof audit DAG takes (each DAG adds its own); ``require_evidence``
    is the DAG's default for a check that had nothing to judge (fail, or report and pass),
    ``lease_wait_s`` how long its audit waits for another audit of the same group."""
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
        "aws_conn_id": Param(
            None,
            type=["null", "string"],
            description="Airflow Connection (type aws) with the S3 keys, endpoint and region; "
            "empty: aws_default if it exists (HAPROOF_AWS_CONN_ID), else the environment",
        ),
        "lease_wait_s": Param(
            lease_wait_s,
            type="integer",
            minimum=0,
            description="seconds to wait while another audit holds a group's lease "
            "(_audit/lease.json); then the audit task fails naming that run",
        ),
    }


def use_s3_connection(cfg: dict[str, Any]) -> None:
    """Inside a task: the S3 keys, endpoint and region of the run's Airflow Connection (type
    aws: ``login`` the access key, ``password`` the secret, extra ``endpoint_url``,
    ``region_name``, ``aws_session_token``), for this task's process only, so boto3 (and the
    spec the audit sends its Spark executors) use them. The connection named by the
    ``aws_conn_id`` param must exist; without one, ``HAPROOF_AWS_CONN_ID`` or ``aws_default``
    is used if it exists, else the environment's credentials. Never in an XCom or a log."""
    from airflow.sdk import BaseHook

    named = cfg.get("aws_conn_id") or os.environ.get("HAPROOF_AWS_CONN_ID")
    if not str(cfg.get("root", "")).startswith("s3://"):
        return
    try:
        conn = BaseHook.get_connection(named or "aws_default")
    except Exception as exc:  # AirflowNotFoundException
        if named:
            raise AuditConfigError(f"S3 connection {named!r} not found: {exc}") from exc
        return
    extra = conn.extra_dejson or {}
    values = {
        "AWS_ACCESS_KEY_ID": conn.login,
        "AWS_SECRET_ACCESS_KEY": conn.password,
        "AWS_SESSION_TOKEN": extra.get("aws_session_token"),
        "AWS_DEFAULT_REGION": extra.get("region_name"),
        "HAPROOF_S3_ENDPOINT": cfg.get("endpoint_url") or extra.get("endpoint_url"),
    }
    for key, value in values.items():
        if value:
            os.environ[key] = str(value)
    log.info("S3 credentials from Airflow connection %s", conn.conn_id)


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
        k
        for k, env in (("root", "HAPROOF_ARCHIVE_ROOT"), ("cluster", "HAPROOF_CLUSTER"))
        if not pick(k, env)
    ]
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
            lease_wait_s=float(params.get("lease_wait_s") or 0),
        )
    except AuditInputError as exc:
        raise AuditConfigError(str(exc)) from exc
    return {**cfg.to_json(), "aws_conn_id": params.get("aws_conn_id") or None}


def audit_pipeline(*, incremental: bool) -> None:
    """resolve → audit (Spark) → expectations (GX) → report (report.html, publish), inside the
    calling ``@dag``: the steps of :mod:`pipeline.steps`, the same ``haproof audit`` runs.

    The task that failed turns red: ``audit`` fails (AirflowFailException: no retry) with the
    verdict's summary as its error when a check failed, or had no evidence while
    ``require_evidence`` is set; ``expectations`` fails when a suite failed (the audit task runs
    the suites, GX's import beside its Spark jobs, and hands their results over: the
    expectations task then does not import GX at all; ``_suites_in_audit``). Each pushes its
    results first (XComs ``audit_summary``, ``expectations_results``), and the later tasks run
    whatever happened before them (trigger rule ``all_done``): the suites still judge a failed
    audit's tables, and ``report`` still builds and publishes every report. ``report`` fails
    whenever the run did not pass (it is the run's leaf: Airflow fails a run by its leaves),
    and its failure sends the alerts (``haproof_alerts.AuditAlertNotifier``)."""
    from airflow.sdk import task
    from haproof_alerts import AuditAlertNotifier
    from haproof_assets import verified_asset
    from haproof_lineage import audit_task
    from haproof_report_link import report_task

    @task
    def resolve(params=None, triggering_asset_events=None) -> dict:
        params = with_incident(params or {}, triggering_asset_events)
        return resolve_config(params, incremental=incremental)

    @audit_task(retries=0)
    def audit(cfg: dict, ti=None) -> dict:
        return run_audit_task(cfg, ti)

    @task(trigger_rule="all_done")
    def expectations(cfg: dict, ti=None) -> list:
        return run_expectations_task(cfg, ti)

    verified = verified_asset()

    @report_task(
        retries=0,
        trigger_rule="all_done",
        on_failure_callback=[AuditAlertNotifier()],
        outlets=[verified] if verified else [],
    )
    def report(cfg: dict, ti=None, outlet_events=None) -> dict:
        doc = run_report_task(cfg, ti)
        if verified is not None:  # a passing run: the verified archive's new event says which
            outlet_events[verified].extra = {"runId": doc["runId"], "reports": doc["reports"]}
        return doc

    cfg = resolve()
    audit(cfg) >> expectations(cfg) >> report(cfg)


def verification_pipeline(*, bound_s: int) -> None:
    """resolve → audit (incremental, no suites or reports) → lag, inside the calling ``@dag``
    (``haproof_continuous_verification``): ``lag`` publishes each group's verification lag
    (``pipeline.verification``) and fails, alerting, when one passes ``bound_s``."""
    from airflow.sdk import task
    from haproof_alerts import AuditAlertNotifier
    from haproof_lineage import audit_task

    @task
    def resolve(params=None) -> dict:
        params = dict(params or {})  # a long-running Spark Connect server when there is one
        params["spark_master"] = params.get("spark_master") or os.environ.get(
            "HAPROOF_VERIFY_SPARK_MASTER"
        )
        cfg = resolve_config(params, incremental=True)
        return {**cfg, "incremental": True, "expectations": False}

    @audit_task(retries=0)
    def audit(cfg: dict, ti=None) -> dict:
        return run_audit_task(cfg, ti)

    @task(trigger_rule="all_done", on_failure_callback=[AuditAlertNotifier()])
    def lag(cfg: dict, ti=None) -> dict:
        """The run's leaf: publishes the lags, then fails (and alerts) when one is past the
        bound or when the audit did not pass (a failed check must fail the run too)."""
        from pipeline.alerts import verdict_line
        from pipeline.steps import PipelineConfig
        from pipeline.verification import publish_lags, verification_lags

        use_s3_connection(cfg)
        store = PipelineConfig.from_json(cfg).spec().open()
        doc = publish_lags(
            store, cfg["cluster"], verification_lags(store, cfg["cluster"]), bound_s * 1000
        )
        for g in doc["groups"]:
            log.info("verification lag of %s: %s ms", g["group"], g["lagMs"])
        if doc["late"]:
            raise _fail(f"verification lag past {bound_s} s: {', '.join(doc['late'])}")
        summary = _audit_summary(ti)
        if not summary["passed"]:
            raise _fail(verdict_line(summary))
        return doc

    cfg = resolve()
    audit(cfg) >> lag(cfg)


def with_incident(params: dict[str, Any], events) -> dict[str, Any]:
    """The params of a run started by failovers (asset events of the archive's watcher,
    ``pipeline.incident_trigger``): the group that failed over (every group when several did)
    and the window from before the earliest failover; params given by hand win."""
    incidents = [
        ev.extra["payload"]
        for evs in (dict(events).values() if events else [])
        for ev in evs
        if isinstance(getattr(ev, "extra", None), dict) and "payload" in ev.extra
    ]
    if not incidents:
        return params
    groups = sorted({str(i["broker_name"]) for i in incidents})
    out = dict(params)
    if not out.get("broker_name"):
        out["broker_name"] = groups[0] if len(groups) == 1 else None
    if not out.get("since"):
        out["since"] = str(min(int(i["since_ms"]) for i in incidents))
    log.info(
        "started by failover(s): %s",
        ", ".join(f"{i['broker_name']} {'/'.join(i['kinds'])} at {i['at_ms']}" for i in incidents),
    )
    return out


def _fail(message: str):
    from airflow.sdk.exceptions import AirflowFailException

    return AirflowFailException(message)


def _audit_summary(ti) -> dict:
    from haproof_alerts import SUMMARY_XCOM

    summary = ti.xcom_pull(task_ids="audit", key=SUMMARY_XCOM)
    if summary is None:
        raise _fail("no verdict: the audit task failed before judging (see its log)")
    return summary


def run_audit_task(cfg: dict, ti) -> dict:
    """The Spark jobs; pushes the compact summary and hands the checks to the OpenLineage
    events (``haproof_lineage``); runs the suites too (:func:`_suites_in_audit`), then fails
    with the verdict's line when the audit did not pass."""
    use_s3_connection(cfg)
    from haproof_alerts import SUMMARY_XCOM
    from haproof_lineage import record_checks

    from pipeline.alerts import verdict_line
    from pipeline.steps import PipelineConfig, audit_step, compact, prefetch_gx

    config = PipelineConfig.from_json(cfg)
    prefetch_gx(config)
    summary = compact(audit_step(config))
    ti.xcom_push(SUMMARY_XCOM, summary)
    record_checks(ti, cfg, summary)
    _suites_in_audit(config, summary, ti)
    if not summary["passed"]:
        raise _fail(verdict_line(summary))
    return summary


def _suites_in_audit(config, summary: dict, ti) -> None:
    """The suites' results, computed in the audit task, for the expectations task to judge
    (XCom ``SUITES_IN_AUDIT_XCOM``): GX's import (seconds) then runs beside the Spark jobs
    instead of alone at the start of the expectations task. The audit task never fails for
    them: a suite that cannot run leaves no results, and the expectations task runs the suites
    itself and fails with the cause."""
    if not config.expectations:
        return
    from pipeline.steps import expectations_step

    try:
        gx = expectations_step(config, summary)
    except Exception as exc:  # judged again, and reported, by the expectations task
        log.warning("suites not run in the audit task (the expectations task runs them): %r", exc)
        return
    ti.xcom_push(SUITES_IN_AUDIT_XCOM, gx)


def run_expectations_task(cfg: dict, ti) -> list:
    """The GX suites over the audit's tables (a failed audit's too): the results the audit task
    computed, else the suites run here; fails on a failed suite."""
    use_s3_connection(cfg)
    from haproof_alerts import GX_XCOM

    from pipeline.steps import PipelineConfig, expectations_step

    config = PipelineConfig.from_json(cfg)
    gx = ti.xcom_pull(task_ids="audit", key=SUITES_IN_AUDIT_XCOM) if config.expectations else []
    if gx is None:
        gx = expectations_step(config, _audit_summary(ti))
    ti.xcom_push(GX_XCOM, gx)
    failed = [f"{r['brokerName']}: {', '.join(r['failedSuites'])}" for r in gx if not r["success"]]
    if failed:
        raise _fail(f"expectations suites failed: {'; '.join(failed)}")
    return gx


def run_report_task(cfg: dict, ti) -> dict:
    """Every group's report.html and ``dag_report.json``; fails when the run did not pass."""
    use_s3_connection(cfg)
    from haproof_alerts import GX_XCOM
    from haproof_report_link import share_report_url

    from pipeline.steps import PipelineConfig, publish_step, report_step

    config = PipelineConfig.from_json(cfg)
    summary = _audit_summary(ti)
    gx = ti.xcom_pull(task_ids="expectations", key=GX_XCOM)
    reports = report_step(config, summary)
    share_report_url(reports, summary, gx or [])
    doc = publish_step(config, summary, gx or [], reports)
    for r in gx or []:
        log.info("data-quality report for %s: %s", r["brokerName"], r["reportUrl"])
    if gx is None and config.expectations:
        raise _fail(f"audit {doc['runId']}: the expectations task gave no results (see its log)")
    if not doc["passed"]:
        raise _fail(
            f"audit {doc['runId']} {doc['status']}: see "
            f"{', '.join(doc['reports'].values()) or doc['root'] + '/' + doc['key']}"
        )
    return doc
