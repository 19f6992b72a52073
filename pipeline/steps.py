"""The steps of one audit run (audit → suites → report → publish), each taking and returning JSON-able values (they travel as
Airflow XComs), and :func:`run_pipeline`, which chains them for the CLI."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from contracts import archive_layout as layout
from contracts import audit_tables as T
from contracts.errors import ArchiveError, AuditInputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PipelineConfig:
    """One validated configuration of an audit run (CLI flags or a DAG run's params)."""

    root: str
    cluster: str
    broker_name: str | None = None
    since: str | None = None  # ISO-8601 or epoch ms
    until: str | None = None
    spark_master: str | None = None
    endpoint_url: str | None = None
    max_lag_bytes: int = T.DEFAULT_MAX_LAG_BYTES
    incremental: bool = False
    require_evidence: bool = False
    expectations: bool = True
    run_id: str | None = None
    #: thresholds of the informational ``delivery`` check (None: it only counts)
    max_duplicated: int | None = None
    max_redelivered: int | None = None
    # one audit of a group at a time (spark_jobs/lease.py): how long to wait for another
    # audit's lease (0: give up at once, LeaseBusyError), and the lease's time to live
    # (defaults: HAPROOF_AUDIT_LEASE_WAIT_S, HAPROOF_AUDIT_LEASE_TTL_S, else 0 and 120)
    lease_wait_s: float = dataclasses.field(
        default_factory=lambda: _env_seconds("HAPROOF_AUDIT_LEASE_WAIT_S", 0.0)
    )
    lease_ttl_s: float = dataclasses.field(
        default_factory=lambda: _env_seconds("HAPROOF_AUDIT_LEASE_TTL_S", 120.0)
    )

    def __post_init__(self) -> None:
        if not self.root or not self.cluster:
            raise AuditInputError("an audit needs an archive root and a cluster")
        if self.lease_wait_s < 0 or self.lease_ttl_s < 3:
            raise AuditInputError(
                f"lease_wait_s must be >= 0 and lease_ttl_s >= 3, got {self.lease_wait_s} "
                f"and {self.lease_ttl_s}"
            )
        if self.max_lag_bytes < 0:
            raise AuditInputError(f"max_lag_bytes must be >= 0, got {self.max_lag_bytes}")
        for name in ("max_duplicated", "max_redelivered"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 0):
                raise AuditInputError(f"{name} must be an integer >= 0, got {value!r}")
        since, until = parse_time(self.since, "since"), parse_time(self.until, "until")
        if since is not None and until is not None and until < since:
            raise AuditInputError(
                f"--until {self.until} is before --since {self.since}: an empty window"
            )
        for what, name in (("cluster", self.cluster), ("brokerName", self.broker_name)):
            if name is not None:
                try:
                    layout.check_name(what, name)
                except layout.LayoutError as exc:
                    raise AuditInputError(str(exc)) from None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PipelineConfig:
        return cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls) if f.name in doc})

    def spec(self):
        from contracts.object_store import StoreSpec

        return StoreSpec(self.root, endpoint_url=self.endpoint_url)


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise AuditInputError(f"{name}={raw!r} is not a number of seconds") from exc


def parse_time(value: str | int | None, what: str) -> int | None:
    """Epoch milliseconds from epoch ms or an ISO-8601 time (UTC when no zone is given)."""
    if value is None or value == "":
        return None
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    try:
        t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise AuditInputError(f"{what} {value!r} is neither epoch ms nor ISO-8601") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def audit_step(cfg: PipelineConfig) -> dict[str, Any]:
    """The Spark jobs, holding the lease of every group audited (:mod:`spark_jobs.lease`; a
    group another audit holds: ``LeaseBusyError`` once ``lease_wait_s`` has passed); the run's
    summary with each group's whole verdict (``groupVerdicts``)."""
    from spark_jobs.archive_reader import list_broker_names
    from spark_jobs.audit import new_run_id
    from spark_jobs.lease import GroupLeases

    run_id = cfg.run_id or new_run_id()
    try:
        store = cfg.spec().open()
        groups = [cfg.broker_name] if cfg.broker_name else list_broker_names(store, cfg.cluster)
        leases = GroupLeases(
            store, cfg.cluster, groups, run_id, ttl_s=cfg.lease_ttl_s, wait_s=cfg.lease_wait_s
        )
    except (ArchiveError, ValueError) as exc:  # LayoutError: not a group name
        raise AuditInputError(f"cannot audit {cfg.root}: {exc}") from exc
    from pipeline import interrupt

    with leases:
        interrupt.at_interrupt(leases.release_now)  # a signal releases them too
        try:
            return _audit(dataclasses.replace(cfg, run_id=run_id), leases.check, groups)
        finally:
            interrupt.forget(leases.release_now)


def _audit(cfg: PipelineConfig, before_save, groups: list[str]) -> dict[str, Any]:
    from spark_jobs.audit import AuditOptions, run_audit
    from spark_jobs.session import get_spark

    opts = AuditOptions(
        spec=cfg.spec(),
        cluster=cfg.cluster,
        broker_name=cfg.broker_name,
        since_ms=parse_time(cfg.since, "since"),
        until_ms=parse_time(cfg.until, "until"),
        run_id=cfg.run_id,
        max_lag_bytes=cfg.max_lag_bytes,
        incremental=cfg.incremental,
        require_evidence=cfg.require_evidence,
        max_duplicated=cfg.max_duplicated,
        max_redelivered=cfg.max_redelivered,
        before_save=before_save,
        broker_names=tuple(groups),
    )
    try:
        opts.spec.open()
    except ArchiveError as exc:
        raise AuditInputError(f"cannot open archive root {cfg.root}: {exc}") from exc
    spark = get_spark("haproof-audit", cfg.spark_master)
    try:
        summary = run_audit(spark, opts)
    except ArchiveError as exc:
        raise AuditInputError(str(exc)) from exc
    finally:
        spark.stop()
    for v in summary["groupVerdicts"]:
        log.info(
            "audit %s/%s: %s (%s)",
            cfg.cluster,
            v["brokerName"],
            v["status"],
            ", ".join(f"{c['name']} {c['status']}" for c in v["checks"]),
        )
    return summary


def compact(summary: dict[str, Any]) -> dict[str, Any]:
    """What later steps need of the audit's summary (small enough for an XCom)."""
    return {
        "runId": summary["runId"],
        "status": summary["status"],
        "passed": summary["passed"],
        "groups": [
            {
                "brokerName": v["brokerName"],
                "status": v["status"],
                "passed": v["passed"],
                "master": v.get("master"),
                "checks": [
                    {
                        k: c.get(k)
                        for k in ("name", "status", "passed", "findings", "evidence", "detail")
                    }
                    for c in v["checks"]
                ],
            }
            for v in summary["groupVerdicts"]
        ],
    }


def expectations_step(
    cfg: PipelineConfig, audit: dict[str, Any], runner=None
) -> list[dict[str, Any]]:
    """The GX suites over every audited group, with the audit's own thresholds, on one GX
    context built once for the run (``runner``: an ``expectations.validation.SuiteRunner``,
    a new one when not given); its phases' seconds are logged."""
    from expectations import run_suites
    from expectations.report import ExpectationsError
    from expectations.suites import parameters
    from expectations.validation import SuiteRunner

    store = cfg.spec().open()
    params = parameters(cfg.max_lag_bytes, cfg.require_evidence)
    runner = runner or SuiteRunner()
    out = []
    for g in audit["groups"]:
        try:
            report = run_suites(store, audit["runId"], g["brokerName"], params, runner)
        except ExpectationsError as exc:
            raise AuditInputError(f"expectations suites: {exc}") from exc
        out.append(
            {
                "brokerName": g["brokerName"],
                "success": report.success,
                "report": report.report_key,
                "reportUrl": f"{store.root.rstrip('/')}/{report.report_key}",
                "failedSuites": [s.suite for s in report.suites if not s.success],
            }
        )
    log.info(
        "expectations: %s",
        ", ".join(f"{phase} {s:.2f} s" for phase, s in runner.timings_s.items()),
    )
    return out


def report_step(cfg: PipelineConfig, audit: dict[str, Any]) -> dict[str, str]:
    """Each audited group's evidence report (report.html, self-contained): {brokerName: URL};
    then the cluster's history page (``pipeline/history.py``)."""
    from expectations.evidence import build_and_publish_report

    store = cfg.spec().open()
    root = store.root.rstrip("/")
    urls = {}
    for g in audit["groups"]:
        key = build_and_publish_report(store, audit["runId"], g["brokerName"])
        urls[g["brokerName"]] = f"{root}/{key}"
        log.info("evidence report for %s: %s", g["brokerName"], urls[g["brokerName"]])
    from pipeline.history import publish_history

    try:  # the nights beside the reports; a history that cannot be built fails no audit
        log.info("audit history of %s: %s", cfg.cluster, publish_history(store, cfg.cluster))
    except (ArchiveError, ValueError) as exc:
        log.warning("audit history of %s not updated: %s", cfg.cluster, exc)
    return urls


def publish_step(
    cfg: PipelineConfig,
    audit: dict[str, Any],
    gx: list[dict[str, Any]],
    reports: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Write ``audits/{runId}/dag_report.json``; ``passed`` decides the run's exit/failure."""
    store = cfg.spec().open()
    passed = audit["passed"] and all(r["success"] for r in gx)
    doc = {
        "runId": audit["runId"],
        "cluster": cfg.cluster,
        "status": audit["status"] if passed or audit["status"] == T.RUN_FAILED else T.RUN_FAILED,
        "passed": passed,
        "audit": audit,
        "expectations": gx,
        "reports": reports or {},
        "root": cfg.root,
    }
    key = layout.audit_run_prefix(audit["runId"]) + layout.DAG_REPORT_NAME
    store.put_mutable(key, json.dumps(doc, indent=2).encode())
    doc["key"] = key
    return doc


def prefetch_gx(cfg: PipelineConfig) -> None:
    """When the suites will run in this process: GX's import started beside the Spark jobs
    (``expectations/gx_import.py``), the modules both import first."""
    if not cfg.expectations:
        return
    from expectations.gx_import import prefetch

    master = cfg.spark_master or os.environ.get("HAPROOF_SPARK_MASTER") or ""
    connect = ["pyspark.sql.connect.session"] if master.startswith("sc://") else []
    prefetch("pandas", "pyarrow.parquet", "pyspark.sql", *connect)


def run_pipeline(cfg: PipelineConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """audit → suites → report → publish; returns (the audit's full summary, the published
    document). GX's import starts beside the Spark jobs when the suites will run."""
    prefetch_gx(cfg)
    summary = audit_step(cfg)
    audit = compact(summary)
    gx = expectations_step(cfg, audit) if cfg.expectations else []
    reports = report_step(cfg, audit)
    doc = publish_step(cfg, audit, gx, reports)
    return summary, doc
