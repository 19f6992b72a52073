"""
### haproof on-demand audit (after an incident)

Started by a failover: when `HAPROOF_ARCHIVE_ROOT` and `HAPROOF_CLUSTER` are set, an
`AssetWatcher` on the cluster's archive (`pipeline.incident_trigger`, in the triggerer) sees a
`role_changed` or `master_lost` event land in the archive and starts this DAG for that group,
from 15 minutes before the failover. Or by hand. A **full** (not incremental) audit of one
broker group, or every group, over a time window — replica consistency, acknowledged durability, log
integrity, offset monotonicity — then the Great Expectations suites and the HTML report.
It does not need earlier runs, and a failing run leaves the nightly watermarks untouched.
A failed check turns `audit` red, a failed suite `expectations`; `report` still publishes, then
fails the run and alerts (webhook and e-mail, as the nightly audit). It waits up to
`lease_wait_s` (default 10 minutes) while another audit holds a group's lease.

Params: `root`, `cluster` (or `HAPROOF_ARCHIVE_ROOT` / `HAPROOF_CLUSTER`), `broker_name` (empty:
every group), `since` / `until` (ISO-8601 or epoch ms), `spark_master`, `endpoint_url`,
`max_lag_bytes`, `lease_wait_s`.

    airflow dags trigger haproof_incident_audit --conf '{"cluster": "prod", "since": "2026-11-22T03:00Z"}'
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import Param, dag
from haproof_assets import archive_asset
from haproof_common import audit_pipeline, base_params

PARAMS = {
    **base_params(require_evidence=False, lease_wait_s=600),
    "broker_name": Param(None, type=["null", "string"], description="one group (empty: all)"),
    "since": Param(None, type=["null", "string"], description="window start (ISO-8601 / ms)"),
    "until": Param(None, type=["null", "string"], description="window end (ISO-8601 / ms)"),
}


ARCHIVE = archive_asset(watch=True)


@dag(
    dag_id="haproof_incident_audit",
    # a failover event in the archive starts it (HAPROOF_ARCHIVE_ROOT / HAPROOF_CLUSTER set)
    schedule=[ARCHIVE] if ARCHIVE is not None else None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    doc_md=__doc__,
    params=PARAMS,
    tags=["haproof", "audit", "on-demand"],
    default_args={"retries": 0},
)
def haproof_incident_audit():
    audit_pipeline(incremental=False)


haproof_incident_audit()
