"""Every DAG file imports in a real DagBag, cheaply: no Spark, GX or boto3 at parse time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.dags.conftest import AIRFLOW_ENV, DAGS

DAG_FILES = {
    "haproof_nightly_audit.py": "haproof_nightly_audit",
    "haproof_incident_audit.py": "haproof_incident_audit",
    "haproof_continuous_verification.py": "haproof_continuous_verification",
}


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import BundleDagBag

    # As the DAG processor loads a bundle: the folder on sys.path, examples off (conftest).
    return BundleDagBag(dag_folder=str(DAGS), bundle_path=DAGS)


def test_every_file_in_dags_is_a_known_dag_or_ignored():
    files = {p.name for p in DAGS.glob("*.py")}
    ignored = (DAGS / ".airflowignore").read_text().split()
    helpers = {
        "haproof_common.py",
        "haproof_report_link.py",
        "haproof_alerts.py",
        "haproof_assets.py",
        "haproof_lineage.py",
    }
    assert files == set(DAG_FILES) | helpers
    assert all(any(h.split(".")[0] in pattern for pattern in ignored) for h in helpers)


def test_dagbag_has_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == set(DAG_FILES.values())


# the project modules a DAG file may import at parse time: the failover trigger and the
# deadline callback (Airflow resolves both when it parses), which import only Airflow
LIGHT = {"pipeline", "pipeline.incident_trigger", "pipeline.deadline_alert"}

AUDIT_DAGS = {f: d for f, d in DAG_FILES.items() if "continuous" not in f}


@pytest.mark.parametrize("filename,dag_id", sorted(AUDIT_DAGS.items()))
def test_dag_shape(dagbag, filename, dag_id):
    dag = dagbag.dags.get(dag_id)
    assert dag is not None, f"{filename} defines no DAG {dag_id}"
    assert dag.fileloc.endswith(filename)
    assert "haproof" in dag.tags and dag.doc_md and "###" in dag.doc_md
    assert [t.task_id for t in dag.topological_sort()] == [
        "resolve",
        "audit",
        "expectations",
        "report",
    ]
    assert {"root", "cluster", "spark_master", "endpoint_url", "max_lag_bytes"} <= set(dag.params)
    # A failed check must not be retried into a pass: audit and report never retry.
    assert dag.get_task("audit").retries == 0 and dag.get_task("report").retries == 0
    # The task that builds the reports shows the "Audit report" link, the others none.
    links = {t.task_id: [link.name for link in t.operator_extra_links] for t in dag.tasks}
    assert links == {"resolve": [], "audit": [], "expectations": [], "report": ["Audit report"]}
    # a failed audit still gets its suites judged and its reports built; the report task, the
    # run's leaf, alerts when it fails
    rules = {t.task_id: getattr(t.trigger_rule, "value", t.trigger_rule) for t in dag.tasks}
    assert rules["expectations"] == rules["report"] == "all_done"
    assert [type(cb).__name__ for cb in dag.get_task("report").on_failure_callback] == [
        "AuditAlertNotifier"
    ]


def test_continuous_verification(dagbag):
    dag = dagbag.dags.get("haproof_continuous_verification")
    assert dag.doc_md and "###" in dag.doc_md and "continuous" in dag.tags
    assert [t.task_id for t in dag.topological_sort()] == ["resolve", "audit", "lag"]
    assert "delta=datetime.timedelta(seconds=600)" in repr(dag.timetable)  # every 10 minutes
    assert dag.max_active_runs == 1 and not dag.catchup and dag.get_task("audit").retries == 0
    (deadline,) = dag.deadline
    assert deadline.interval.total_seconds() == 1800  # three periods
    assert deadline.callback.path == "pipeline.deadline_alert.deadline_missed"
    assert type(deadline.reference).__name__ == "DagRunQueuedAtDeadline"


def test_schedules(dagbag):
    nightly = dagbag.dags.get("haproof_nightly_audit")
    incident = dagbag.dags.get("haproof_incident_audit")
    assert nightly.params["incremental"] is True and not nightly.catchup
    assert type(nightly.timetable).__name__ == "CronTriggerTimetable"
    assert "expression='0 2 * * *'" in repr(nightly.timetable)
    assert type(incident.timetable).__name__ == "NullTimetable"  # schedule=None: on demand only
    assert {"broker_name", "since", "until"} <= set(incident.params)


@pytest.mark.parametrize("filename", sorted(DAG_FILES))
def test_parsing_imports_nothing_heavy(filename):
    """Parse each file in a fresh interpreter and list the heavy or project modules it pulled
    in: nothing of the project is imported at parse time, only when a task runs."""
    code = (
        "import importlib.util, json, sys\n"
        f"sys.path.insert(0, {str(DAGS)!r})\n"
        f"spec = importlib.util.spec_from_file_location('d', {str(DAGS / filename)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "heavy = ('pyspark', 'great_expectations', 'boto3', 'pandas',\n"
        "         'contracts', 'broker', 'spark_jobs', 'expectations', 'pipeline')\n"
        f"light = {sorted(LIGHT)!r}\n"  # callables Airflow imports at parse, importing nothing
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules if m not in light}\n"
        "                        & set(heavy))))\n"
    )
    env = {**os.environ, **AIRFLOW_ENV}
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == []


def test_a_configured_archive_is_a_watched_asset_still_cheap_to_parse(tmp_path):
    """With HAPROOF_ARCHIVE_ROOT/HAPROOF_CLUSTER set, the incident DAG runs on the archive
    Asset, whose watcher is the failover trigger; parsing imports only the trigger's module."""
    code = (
        "import importlib.util, json, sys\n"
        f"sys.path.insert(0, {str(DAGS)!r})\n"
        f"spec = importlib.util.spec_from_file_location('d', {str(DAGS / 'haproof_incident_audit.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "heavy = ('pyspark', 'great_expectations', 'boto3', 'pandas',\n"
        "         'contracts', 'broker', 'spark_jobs', 'expectations')\n"
        "print(json.dumps({'heavy': sorted({x.split('.')[0] for x in sys.modules} & set(heavy)),\n"
        "  'pipeline': sorted(x for x in sys.modules if x.split('.')[0] == 'pipeline'),\n"
        "  'asset': [m.ARCHIVE.name, m.ARCHIVE.uri],\n"
        "  'watchers': [w.trigger.serialize()[0] for w in m.ARCHIVE.watchers]}))\n"
    )
    env = {
        **os.environ,
        **AIRFLOW_ENV,
        "HAPROOF_ARCHIVE_ROOT": f"file://{tmp_path}/a",
        "HAPROOF_CLUSTER": "prod",
    }
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["heavy"] == [] and got["pipeline"] == ["pipeline", "pipeline.incident_trigger"]
    assert got["asset"] == ["haproof_archive_prod", f"file://{tmp_path}/a/v1/prod"]
    assert got["watchers"] == ["pipeline.incident_trigger.ArchiveFailoverTrigger"]
