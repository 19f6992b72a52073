"""Continuous verification in a real Airflow (API server, scheduler, DAG processor, triggerer):
when verification stops (here: another audit holds the group's lease, so the run cannot
finish), the DAG's deadline fires and its callback, in the triggerer, posts the alert to a real
local webhook."""

from __future__ import annotations

import time

from contracts.audit_state import audit_lease_key
from contracts.object_store import open_store
from spark_jobs.lease import acquire
from tests.conftest import wait_until
from tests.dags.airflow_stack import AirflowStack
from tests.dags.alert_servers import WebhookServer
from tests.support.haproof_cli import ERIC, ship

_UNPAUSE = """
import json
from sqlalchemy import select, update
from airflow.models import DagModel, DagRun
from airflow.utils.session import create_session
with create_session() as s:
    s.execute(update(DagModel).where(DagModel.dag_id == "haproof_continuous_verification")
              .values(is_paused=False))
    runs = s.scalars(select(DagRun).where(
        DagRun.dag_id == "haproof_continuous_verification")).all()
    print(json.dumps([[r.run_id, str(r.state)] for r in runs]))
"""


def test_the_lag_deadline_fires_when_verification_stops(tmp_path, golden_stores):
    root = tmp_path / "a"
    ship(golden_stores / ERIC, f"file://{root}")
    store = open_store(f"file://{root}")
    # verification is stuck: another audit holds broker-a for the whole test
    acquire(store, audit_lease_key("rmq", "broker-a"), "stuck-audit", ttl_s=3600)
    with WebhookServer() as hook:
        stack = AirflowStack(
            tmp_path / "airflow",
            {
                "HAPROOF_ARCHIVE_ROOT": f"file://{root}",
                "HAPROOF_CLUSTER": "rmq",
                "HAPROOF_VERIFY_EVERY_S": "3600",
                "HAPROOF_VERIFY_LAG_BOUND_S": "20",
                "HAPROOF_ALERT_WEBHOOK_URL": hook.url("/deadline"),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            },
        )
        try:
            stack.start()

            def running():
                stack.alive()
                return stack.query(_UNPAUSE)

            (run_id, _), *_ = wait_until(
                running, timeout_s=300, what="a verification run", every_s=1
            )
            t0 = time.monotonic()

            def alerted():
                stack.alive()
                return hook.posts

            (post, *_) = wait_until(
                alerted, timeout_s=300, what="the deadline's alert", every_s=0.5
            )
            print(f"deadline alert {time.monotonic() - t0:.1f} s after the run was seen")
        finally:
            stack.stop()
    alert = post["json"]
    assert post["path"] == "/deadline" and alert["status"] == "DEADLINE_MISSED"
    assert alert["cluster"] == "rmq" and "did not finish within 20 s" in alert["detail"]
    assert run_id in alert["detail"]
