"""Event-driven incident audits: the failover scan over a real archive listing, and, in a real
Airflow (API server, scheduler, DAG processor, triggerer), a failover event landing in the
archive starting haproof_incident_audit for its group, with the time from the event to the
published verdict measured."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from contracts import archive_layout as layout
from contracts.object_store import open_store
from pipeline.incidents import FailoverScan
from tests.conftest import wait_until
from tests.dags.airflow_stack import AirflowStack

ERIC = "EricPanGopher_rocketmq_unit_test_store"
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


def test_a_failover_in_the_archive_starts_the_incident_audit(tmp_path, golden_stores):
    root = tmp_path / "a"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "archive",
            "--store-dir",
            str(golden_stores / ERIC),
            "--root",
            f"file://{root}",
            "--cluster",
            "rmq",
            "--broker-name",
            "broker-a",
            "--node",
            "broker-a-0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    since = int(time.time() * 1000)
    stack = AirflowStack(
        tmp_path / "airflow",
        {
            "HAPROOF_ARCHIVE_ROOT": f"file://{root}",
            "HAPROOF_CLUSTER": "rmq",
            "HAPROOF_FAILOVER_POLL_S": "1",
            "HAPROOF_FAILOVER_SINCE_MS": str(since),
            "HAPROOF_SPARK_MASTER": "local[2]",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        },
    )
    try:
        stack.start()

        def watching():
            stack.alive()
            state = stack.query(_RUNS)
            return any(
                t["classpath"].endswith("ArchiveFailoverTrigger") and t["triggerer"]
                for t in state["triggers"]
            )

        wait_until(watching, timeout_s=300, what="the failover watcher in the triggerer", every_s=1)
        store = open_store(f"file://{root}")
        at = int(time.time() * 1000)
        t_event = time.monotonic()
        _event(store, "broker-a-0", at, "role_changed")

        def verdict():
            stack.alive()
            reports = list(root.glob("audits/*/dag_report.json"))
            return reports[0] if reports else None

        report_path = wait_until(
            verdict, timeout_s=600, what="the incident audit's verdict", every_s=0.2
        )
        event_to_verdict_s = time.monotonic() - t_event
        print(f"event-to-verdict: {event_to_verdict_s:.1f} s")
        report = json.loads(report_path.read_text())
        assert [g["brokerName"] for g in report["audit"]["groups"]] == ["broker-a"]
        state = stack.query(_RUNS)
        (run,) = state["runs"]
        assert run["type"] in ("asset_triggered", "DagRunType.ASSET_TRIGGERED")
        print("task seconds:", {t: d for t, (_, d) in run["tasks"].items()})
        verdict_doc = json.loads((root / f"audits/{report['runId']}/verdict.json").read_text())
        assert verdict_doc["window"]["since"] == at - 15 * 60 * 1000
        (tmp_path / "event_to_verdict_s").write_text(f"{event_to_verdict_s:.1f}")
    finally:
        stack.stop()
