"""
### haproof nightly audit

Every night, audits every broker group of one cluster's archive **incrementally** (only what is
new since the last passing run's watermarks, `_audit/state.json`): replica consistency,
acknowledged durability, log integrity and offset monotonicity (Spark), then the Great
Expectations suites over the audit's tables, then publishes `audits/{runId}/dag_report.json`
and one HTML data-quality report per group.

The run **fails** when any check or suite fails, and, by default (`require_evidence`), when a
check had nothing to judge (NO_EVIDENCE: one node only, no committed offsets, no acknowledged
offsets): a green night must rest on evidence. The task that failed is red (`audit` with the
verdict's line, `expectations` with the failed suites); `report` still builds and publishes the
reports, then fails the run and **alerts**: a webhook (HTTP Connection `haproof_alerts` or
`HAPROOF_ALERT_WEBHOOK_URL`) and an e-mail (`HAPROOF_ALERT_EMAIL`, SMTP Connection
`smtp_default` or `HAPROOF_ALERT_SMTP_CONN`), both with the report's link.

One audit of a group at a time: the audit holds each group's lease (`_audit/lease.json`) and
waits up to `lease_wait_s` (default an hour) for another audit's, then fails naming that run.

Params (or environment): `root` (`HAPROOF_ARCHIVE_ROOT`, e.g. `s3://bucket/prefix`), `cluster`
(`HAPROOF_CLUSTER`), `spark_master` (`HAPROOF_SPARK_MASTER`, default `local[*]`),
`endpoint_url` (`HAPROOF_S3_ENDPOINT`), `max_lag_bytes`, `require_evidence` (default true).
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import Param, dag
from haproof_common import audit_pipeline, base_params

PARAMS = {
    **base_params(require_evidence=True, lease_wait_s=3600),
    "incremental": Param(True, type="boolean", description="only what is new since last pass"),
}


@dag(
    dag_id="haproof_nightly_audit",
    schedule="0 2 * * *",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    params=PARAMS,
    tags=["haproof", "audit", "nightly"],
    default_args={"retries": 1, "retry_delay": dt.timedelta(minutes=5)},
)
def haproof_nightly_audit():
    audit_pipeline(incremental=True)


haproof_nightly_audit()
