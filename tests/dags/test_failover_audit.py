"""Event-driven incident audits: the failover scan over a real archive listing, and, in a real
Airflow (API server, scheduler, DAG processor, triggerer, LocalExecutor), a failover event
landing in the archive starting haproof_incident_audit for its group, with the time from the
event's upload to the published verdict measured (Spark: a warm local Spark Connect server, the
goal's setting), and the OpenLineage events the audit tasks emit under the scheduler (file
transport): one assertion per check, for a passing run and a failing one (a flipped byte, the
DAG triggered by hand in the same Airflow)."""

from __future__ import annotations

import json
import os
import time

import pytest

from contracts import archive_layout as layout
from contracts.object_store import open_store
from pipeline.incidents import FailoverScan
from tests.conftest import wait_until
from tests.dags.airflow_stack import AirflowStack
from tests.dags.lineage_events import assert_audit_lineage, lineage_env
from tests.support.haproof_cli import ERIC, flipped_store, ship
from tests.support.spark_connect import spark_connect_server

T0 = 1_800_000_000_000


def _event(store, node: str, at_ms: int, kind: str, group: str = "broker-a") -> str:
    extra = {"from": "SLAVE", "to": "SYNC_MASTER"} if kind == "role_changed" else {}
    doc = layout.make_event(kind, node, "rmq", group, at_ms, 2, **extra)
    key = layout.event_key("rmq", group, node, at_ms, kind)
    store.put(key, layout.json_bytes(doc))
    return key


def test_scan_reports_each_failover_once_per_group(tmp_path):
    store = open_store(f"file://{tmp_path}/a")
    _event(store, "broker-a-0", T0 - 1000, "role_changed")  # history: before the watch began
    _event(store, "broker-a-0", T0 + 5, "started")
    scan = FailoverScan(store, "rmq", start_ms=T0, before_ms=60_000)
    assert scan.poll() == []
    k1 = _event(store, "broker-a-1", T0 + 2000, "role_changed")
    k0 = _event(store, "broker-a-0", T0 + 1000, "master_lost")
    kb = _event(store, "broker-b-0", T0 + 3000, "role_changed", group="broker-b")
    incidents = scan.poll()
    assert [(i.broker_name, i.at_ms, i.kinds, i.keys, i.since_ms) for i in incidents] == [
        ("broker-a", T0 + 1000, ("master_lost", "role_changed"), (k0, k1), T0 + 1000 - 60_000),
        ("broker-b", T0 + 3000, ("role_changed",), (kb,), T0 + 3000 - 60_000),
    ]
    assert scan.poll() == []  # each event once
    listed = store.requests["keys_listed"]
    scan.poll()
    assert store.requests["keys_listed"] == listed  # listings resume after the newest key
    _event(store, "broker-a-1", T0 + 9000, "role_changed")
    assert [i.at_ms for i in scan.poll()] == [T0 + 9000]
    # a restarted watcher with the marks it saved repeats nothing
    again = FailoverScan(store, "rmq", start_ms=T0, marks=dict(scan.marks))
    assert again.poll() == []


_RUNS = """
import json
from sqlalchemy import select, update
from airflow.models import DagModel, DagRun, TaskInstance
from airflow.models.trigger import Trigger
from airflow.utils.session import create_session
with create_session() as s:
    # only the incident DAG runs here (the others stay paused, as created)
    s.execute(update(DagModel).where(DagModel.dag_id == "haproof_incident_audit")
              .values(is_paused=False))
    runs = s.scalars(select(DagRun).where(DagRun.dag_id == "haproof_incident_audit")).all()
    triggers = s.scalars(select(Trigger)).all()
    print(json.dumps({
        "runs": [{"run_id": r.run_id, "state": str(r.state), "type": str(r.run_type),
                  "tasks": {t.task_id: [str(t.state), t.duration] for t in s.scalars(
                      select(TaskInstance).where(TaskInstance.dag_id == r.dag_id,
                                                 TaskInstance.run_id == r.run_id))}}
                 for r in runs],
        "triggers": [{"classpath": t.classpath, "triggerer": t.triggerer_id} for t in triggers],
    }))
"""

DAG = "haproof_incident_audit"


def _finished_run(stack: AirflowStack, run_id: str) -> dict | None:
    """The incident DAG's run ``run_id`` (or, for "", its asset-triggered run) once ended."""
    stack.alive()
    runs = stack.query(_RUNS)["runs"]
    mine = [
        r for r in runs if r["run_id"] == run_id or (not run_id and "asset" in r["type"].lower())
    ]
    assert len(mine) <= 1, mine  # one failover, one run
    done = [r for r in mine if r["state"] in ("success", "failed")]
    return done[0] if done else None


def _watching(stack: AirflowStack) -> bool:
    stack.alive()
    return any(
        t["classpath"].endswith("ArchiveFailoverTrigger") and t["triggerer"]
        for t in stack.query(_RUNS)["triggers"]
    )


def _report_of(root, group: str) -> dict | None:
    """The published ``dag_report.json`` of the run that audited ``group``, with its mtime."""
    for p in root.glob("audits/*/dag_report.json"):
        doc = json.loads(p.read_text())
        if [g["brokerName"] for g in doc["audit"]["groups"]] == [group]:
            return {**doc, "publishedAt": p.stat().st_mtime}
    return None


def _failing_run_by_hand(stack: AirflowStack, root, ol) -> None:
    """A failing audit (broker-b, a flipped byte) under the scheduler: the audit task is red and
    its FAIL event says which check failed. It runs first and warms the Spark Connect server."""
    conf = json.dumps({"broker_name": "broker-b"})
    stack.run("dags", "trigger", DAG, "--run-id", "by-hand-b", "--conf", conf)
    run = wait_until(
        lambda: _finished_run(stack, "by-hand-b"), timeout_s=900, what="the failing run", every_s=1
    )
    assert run["state"] == "failed" and run["tasks"]["audit"][0] == "failed", run
    bad = _report_of(root, "broker-b")
    assert bad["passed"] is False
    (group,) = bad["audit"]["groups"]
    assertions = assert_audit_lineage(ol, DAG, "FAIL", root, group)
    assert [a["assertion"] for a in assertions if not a["success"]] == ["log_integrity"]


# two audits in a real Airflow: ~4 min on a quiet machine, twice that on a busy one
@pytest.mark.timeout(1500)
def test_a_failover_in_the_archive_starts_the_incident_audit(
    tmp_path, golden_stores, record_property
):
    root = tmp_path / "a"
    ship(golden_stores / ERIC, f"file://{root}")
    # a second group with one flipped byte: the failing audit, started by hand
    flipped_store(golden_stores, tmp_path / "bad")
    ship(tmp_path / "bad", f"file://{root}", group="broker-b")
    ol = tmp_path / "openlineage.jsonl"
    with spark_connect_server() as spark:  # the goal's setting: a warm Spark Connect server
        stack = AirflowStack(
            tmp_path / "airflow",
            {
                "HAPROOF_ARCHIVE_ROOT": f"file://{root}",
                "HAPROOF_CLUSTER": "rmq",
                "HAPROOF_FAILOVER_POLL_S": "1",
                "HAPROOF_FAILOVER_SINCE_MS": str(int(time.time() * 1000)),
                "HAPROOF_SPARK_MASTER": spark,
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                **lineage_env(ol),
            },
        )
        try:
            stack.start()
            wait_until(lambda: _watching(stack), 300, "the failover watcher", every_s=1)
            _failing_run_by_hand(stack, root, ol)
            at = int(time.time() * 1000)
            _event(open_store(f"file://{root}"), "broker-a-0", at, "role_changed")
            uploaded_s = time.time()  # the event's object is in the archive from here
            report = wait_until(
                lambda: stack.alive() or _report_of(root, "broker-a"),
                timeout_s=600,
                what="the incident audit's verdict",
                every_s=0.2,
            )
            load_1m = os.getloadavg()[0]
            run = wait_until(lambda: _finished_run(stack, ""), 300, "the run's end", every_s=1)
        finally:
            stack.stop()
    assert run["type"] in ("asset_triggered", "DagRunType.ASSET_TRIGGERED")
    assert run["state"] == "success", run
    # the verdict's publication: the report document's write, not when the poll saw it
    event_to_verdict_s = report["publishedAt"] - uploaded_s
    figure = {
        "bench": "event_to_verdict",
        "seconds": round(event_to_verdict_s, 1),
        "spark": "warm Spark Connect, local[2]",
        "cores": os.cpu_count(),
        "load_1m": round(load_1m, 2),
        "task_seconds": {t: d for t, (_, d) in run["tasks"].items()},
    }
    print(json.dumps(figure))
    record_property("event_to_verdict", json.dumps(figure))  # in CI's JUnit XML too
    verdict_doc = json.loads((root / f"audits/{report['runId']}/verdict.json").read_text())
    assert verdict_doc["window"]["since"] == at - 15 * 60 * 1000
    (group,) = report["audit"]["groups"]
    assert_audit_lineage(ol, DAG, "COMPLETE", root, group, runs=2)
