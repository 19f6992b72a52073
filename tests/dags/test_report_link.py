"""Which report the "Audit report" link opens (the link itself is checked on real DAG runs in
test_dag_runs.py)."""

from __future__ import annotations

import sys

from tests.dags.conftest import DAGS

sys.path.insert(0, str(DAGS))  # as the DAG processor does: the dags folder on sys.path

from haproof_report_link import link_target  # noqa: E402

REPORTS = {"broker-b": "file:///r/b/report.html", "broker-a": "file:///r/a/report.html"}


def _audit(*failing: str) -> dict:
    return {"groups": [{"brokerName": n, "passed": n not in failing} for n in sorted(REPORTS)]}


def _gx(*failing: str) -> list[dict]:
    return [{"brokerName": n, "success": n not in failing} for n in sorted(REPORTS)]


def test_a_passing_run_links_the_first_group():
    assert link_target(REPORTS, _audit(), _gx()) == REPORTS["broker-a"]


def test_a_failing_run_links_the_first_failing_group():
    assert link_target(REPORTS, _audit("broker-b"), _gx()) == REPORTS["broker-b"]
    assert link_target(REPORTS, _audit(), _gx("broker-b")) == REPORTS["broker-b"]
    assert link_target(REPORTS, _audit("broker-b"), _gx("broker-a")) == REPORTS["broker-a"]


def test_no_report_no_link():
    assert link_target({}, _audit("broker-a"), _gx()) is None
