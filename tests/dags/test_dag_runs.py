"""The audit DAGs run for real with ``airflow dags test``: Spark local mode, GX, file:// archive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.dags.alert_servers import SmtpServer, WebhookServer, html_of, wait_for
from tests.dags.lineage_events import assert_audit_lineage, lineage_env
from tests.support.haproof_cli import ERIC, flipped_store, ship


def _dags_test(env, dag_id: str, conf: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [env["HAPROOF_AIRFLOW_BIN"], "dags", "test", dag_id, "-c", json.dumps(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


# What the API server answers for GET /dags/{dag_id}/dagRuns/{run_id}/taskInstances/report/links:
# its route function, called on the DAG as serialized by the run, against the run's database.
_LINKS = """
import json, sys
from sqlalchemy import select
from airflow.api_fastapi.core_api.routes.public.extra_links import get_extra_links
from airflow.models import DagRun
from airflow.models.dagbag import DBDagBag
from airflow.utils.session import create_session
dag_id = sys.argv[1]
with create_session() as session:
    run_id = session.scalar(
        select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc())
    )
    links = get_extra_links(dag_id=dag_id, dag_run_id=run_id, task_id="report",
                            session=session, dag_bag=DBDagBag())
print(json.dumps(links.extra_links))
"""


_STATES = """
import json, sys
from sqlalchemy import select
from airflow.models import DagRun, TaskInstance
from airflow.utils.session import create_session
dag_id = sys.argv[1]
with create_session() as session:
    run = session.scalars(
        select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc())
    ).first()
    tis = session.scalars(
        select(TaskInstance).where(TaskInstance.dag_id == dag_id,
                                   TaskInstance.run_id == run.run_id)
    ).all()
    print(json.dumps({"run": str(run.state), **{ti.task_id: str(ti.state) for ti in tis}}))
"""


def _states(env, dag_id: str) -> dict:
    """The latest run's state and its task instances' states, from the metadata database."""
    res = subprocess.run(
        [sys.executable, "-c", _STATES, dag_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _report_links(env, dag_id: str) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", _LINKS, dag_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _assert_links_to_the_report(env, dag_id: str, report: dict) -> None:
    """The task's "Audit report" link names the group's report.html, which exists on disk."""
    (url,) = report["reports"].values()
    assert _report_links(env, dag_id) == {"Audit report": url}
    assert url.startswith("file://") and url.endswith(f"/{report['runId']}/broker-a/report.html")
    assert "<html" in Path(url.removeprefix("file://")).read_text()[:500].lower()


def _reports(root_dir) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root_dir.glob("audits/*/dag_report.json"))]


def test_nightly_dag_passes_on_a_real_rocketmq_archive(tmp_path, golden_stores, airflow_env):
    ship(golden_stores / ERIC, f"file://{tmp_path}/a")
    # one node with no committed offsets: nothing to judge for three checks, which the nightly
    # run fails on by default (require_evidence); this run accepts it
    ol = tmp_path / "openlineage.jsonl"
    res = _dags_test(
        {**airflow_env, **lineage_env(ol)},
        "haproof_nightly_audit",
        {"root": f"file://{tmp_path}/a", "cluster": "rmq", "require_evidence": False},
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    (report,) = _reports(tmp_path / "a")
    (group,) = report["audit"]["groups"]
    assert_audit_lineage(ol, "haproof_nightly_audit", "COMPLETE", tmp_path / "a", group)
    assert report["passed"] is True
    assert report["status"] == "NO_EVIDENCE"
    assert _states(airflow_env, "haproof_nightly_audit") == {
        "run": "success",
        "resolve": "success",
        "audit": "success",
        "expectations": "success",
        "report": "success",
    }
    assert [c["name"] for c in report["audit"]["groups"][0]["checks"]] == [
        "archive_integrity",
        "replica_consistency",
        "acknowledged_durability",
        "log_integrity",
        "offset_monotonicity",
        "delivery",
    ]
    (gx,) = report["expectations"]
    assert gx["success"] is True and gx["failedSuites"] == []
    _assert_links_to_the_report(airflow_env, "haproof_nightly_audit", report)
    index = tmp_path / "a" / gx["report"]
    assert index.is_file() and "haproof_ranges" in index.read_text()
    # The nightly run is incremental: it moved the verified watermark of the group.
    state = json.loads((tmp_path / "a/v1/rmq/broker-a/_audit/state.json").read_text())
    assert state["verified"]["broker-a-0"] == 31112


def test_incident_dag_fails_on_a_flipped_byte(tmp_path, golden_stores, airflow_env):
    bad = tmp_path / "store"
    rec = flipped_store(golden_stores, bad)
    ship(bad, f"file://{tmp_path}/a")
    with WebhookServer() as hook, SmtpServer() as smtp:
        env = {
            **airflow_env,
            "AIRFLOW_CONN_HAPROOF_ALERTS": json.dumps(
                {
                    "conn_type": "http",
                    "host": f"http://127.0.0.1:{hook.port}",
                    "extra": {"endpoint": "/alerts"},
                }
            ),
            "AIRFLOW_CONN_SMTP_DEFAULT": smtp.connection_json(),
            "HAPROOF_ALERT_EMAIL": "oncall@example.com",
        }
        ol = tmp_path / "openlineage.jsonl"
        res = _dags_test(
            {**env, **lineage_env(ol)},
            "haproof_incident_audit",
            {"root": f"file://{tmp_path}/a", "cluster": "rmq", "broker_name": "broker-a"},
        )
        wait_for(lambda: hook.posts and smtp.messages, what="the alerts")
    out = res.stdout + res.stderr
    assert res.returncode != 0
    # the task that failed is red: audit with the verdict's line, expectations with its suite;
    # the report was still built and published; the run failed
    assert _states(airflow_env, "haproof_incident_audit") == {
        "run": "failed",
        "resolve": "success",
        "audit": "failed",
        "expectations": "failed",
        "report": "failed",
    }
    assert "FAILED: broker-a log_integrity fail (1 finding(s))" in out
    assert "expectations suites failed: broker-a: haproof_records_issues" in out
    (report,) = _reports(tmp_path / "a")
    assert report["passed"] is False
    # the FAIL event of the audit task says which check failed: log_integrity success=false
    (group,) = report["audit"]["groups"]
    assertions = assert_audit_lineage(ol, "haproof_incident_audit", "FAIL", tmp_path / "a", group)
    assert [a["assertion"] for a in assertions if not a["success"]] == ["log_integrity"]
    checks = {c["name"]: c for c in report["audit"]["groups"][0]["checks"]}
    assert not checks["log_integrity"]["passed"] and checks["log_integrity"]["findings"] == 1
    (gx,) = report["expectations"]
    assert gx["failedSuites"] == ["haproof_records_issues"]
    _assert_links_to_the_report(airflow_env, "haproof_incident_audit", report)  # failed: linked
    # one alert per failed run, on each channel, naming the check and linking the report
    (post,) = hook.posts
    alert = post["json"]
    assert post["path"] == "/alerts" and alert["status"] == "FAILED"
    assert alert["cluster"] == "rmq" and alert["groups"] == ["broker-a"]
    assert alert["runId"] == report["runId"]
    assert alert["reportUrl"] == report["reports"]["broker-a"]
    assert {(f["check"], f["status"]) for f in alert["failedChecks"]} >= {
        ("log_integrity", "fail"),
        ("expectations:haproof_records_issues", "fail"),
    }
    assert "/dags/haproof_incident_audit/runs/" in alert["dagRunUrl"]
    (mail,) = smtp.messages
    assert report["reports"]["broker-a"] in html_of(mail) and "log_integrity" in html_of(mail)
    verdict = json.loads(next((tmp_path / "a").glob("audits/*/broker-a/verdict.json")).read_text())
    assert verdict["findings"]["records_issues"][0]["offset"] == rec.physical_offset
    # An incident audit is a full audit; a failing run leaves no watermark behind.
    assert not (tmp_path / "a/v1/rmq/broker-a/_audit/state.json").exists()


def test_continuous_verification_publishes_the_lag(tmp_path, golden_stores, airflow_env):
    ship(golden_stores / ERIC, f"file://{tmp_path}/a")
    # under `airflow dags test` the DAG leaves its deadline out (Airflow 3.3.2's dag.test fails
    # a successful run of a DAG with one, apache/airflow#73428); the deadline itself is tested
    # with the real scheduler and triggerer in test_continuous.py
    res = _dags_test(
        airflow_env,
        "haproof_continuous_verification",
        {"root": f"file://{tmp_path}/a", "cluster": "rmq"},
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    assert _states(airflow_env, "haproof_continuous_verification") == {
        "run": "success",
        "resolve": "success",
        "audit": "success",
        "lag": "success",
    }
    lag = json.loads((tmp_path / "a/audits/_history/rmq/lag.json").read_text())
    (group,) = lag["groups"]
    assert group["group"] == "broker-a" and 0 <= group["lagMs"] < lag["boundMs"]
    assert lag["late"] == [] and lag["boundMs"] == 1_800_000
    # incremental, no suites and no report: only the audit's own outputs
    (run,) = [p for p in (tmp_path / "a/audits").iterdir() if not p.name.startswith("_")]
    assert not (run / "broker-a" / "report.html").exists()
    assert (tmp_path / "a/v1/rmq/broker-a/_audit/state.json").exists()
