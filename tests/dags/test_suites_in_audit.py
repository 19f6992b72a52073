"""The suites run in the audit task and judged by the expectations task (dags/haproof_common.py):
the expectations task turns red on a failed suite either way, imports no GX when the audit task
handed results over, and runs the suites itself when it did not (the real DAG runs, with a
failed check and a failed suite each on its own task, are test_dag_runs.py's)."""

from __future__ import annotations

import sys

import pytest

from tests.dags.conftest import DAGS

sys.path.insert(0, str(DAGS))  # as the DAG processor does: the dags folder on sys.path

import haproof_common as hc  # noqa: E402
from airflow.sdk.exceptions import AirflowFailException  # noqa: E402
from haproof_alerts import GX_XCOM, SUMMARY_XCOM  # noqa: E402

CFG = {"root": "file:///nowhere", "cluster": "prod", "expectations": True}
SUMMARY = {"runId": "20261126T020000Z-abc123", "status": "FAILED", "passed": False, "groups": []}
FAILED = [
    {
        "brokerName": "broker-a",
        "success": False,
        "report": "audits/x/broker-a/report/index.html",
        "reportUrl": "file:///nowhere/audits/x/broker-a/report/index.html",
        "failedSuites": ["haproof_records_issues"],
    }
]


class _TI:
    def __init__(self, xcoms: dict) -> None:
        self.xcoms, self.pushed = xcoms, {}

    def xcom_pull(self, task_ids, key="return_value"):
        return self.xcoms.get((task_ids, key))

    def xcom_push(self, key, value) -> None:
        self.pushed[key] = value


@pytest.fixture
def suites_here(monkeypatch) -> list:
    """The suites as the expectations task would run them itself: each call recorded."""
    calls = []

    def run(config, summary, runner=None):
        calls.append((config.cluster, summary["runId"]))
        return FAILED

    monkeypatch.setattr("pipeline.steps.expectations_step", run)
    return calls


def test_the_audit_tasks_results_are_judged_without_running_the_suites_again(suites_here):
    ti = _TI({("audit", hc.SUITES_IN_AUDIT_XCOM): FAILED, ("audit", SUMMARY_XCOM): SUMMARY})
    with pytest.raises(AirflowFailException, match="broker-a: haproof_records_issues"):
        hc.run_expectations_task(CFG, ti)
    assert suites_here == [] and ti.pushed[GX_XCOM] == FAILED


def test_without_the_audit_tasks_results_the_suites_run_in_the_expectations_task(suites_here):
    ti = _TI({("audit", SUMMARY_XCOM): SUMMARY})
    with pytest.raises(AirflowFailException, match="broker-a: haproof_records_issues"):
        hc.run_expectations_task(CFG, ti)
    assert suites_here == [("prod", SUMMARY["runId"])] and ti.pushed[GX_XCOM] == FAILED


def test_suites_that_cannot_run_in_the_audit_task_leave_it_to_the_expectations_task(
    monkeypatch,
):
    from pipeline.steps import PipelineConfig

    def broken(config, summary, runner=None):
        raise OSError("no tables")

    monkeypatch.setattr("pipeline.steps.expectations_step", broken)
    ti = _TI({})
    hc._suites_in_audit(PipelineConfig.from_json(CFG), SUMMARY, ti)  # the audit task goes on
    assert ti.pushed == {}
    hc._suites_in_audit(PipelineConfig.from_json({**CFG, "expectations": False}), SUMMARY, ti)
    assert ti.pushed == {}


def test_the_audit_task_hands_its_suites_results_over(suites_here):
    from pipeline.steps import PipelineConfig

    ti = _TI({})
    hc._suites_in_audit(PipelineConfig.from_json(CFG), SUMMARY, ti)
    assert ti.pushed == {hc.SUITES_IN_AUDIT_XCOM: FAILED}
    assert suites_here == [("prod", SUMMARY["runId"])]
