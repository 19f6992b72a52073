"""``haproof audit --json``: one shape whatever the number of groups, valid against
docs/schemas/audit.schema.json; a failing check says where its first finding is."""

from __future__ import annotations

import json

import pytest
from jsonschema import ValidationError

from contracts import audit_tables as T
from pipeline.audit_json import audit_document, where_text
from tests.support import schemas


def _verdict(name: str, failing: bool) -> dict:
    checks = [T.CheckResult(c, T.STATUS_PASS, 0, 10, "ok").to_json() for c in T.CHECKS]
    findings: dict = {}
    if failing:
        checks[1] = T.CheckResult(
            T.REPLICA_CONSISTENCY, T.STATUS_FAIL, 1, 10, "1 finding"
        ).to_json()
        findings["ranges"] = [
            {
                "pair": f"{name}-0->{name}-1",
                "master": f"{name}-0",
                "node": f"{name}-1",
                "start": 0,
                "end": 100,
                "bytes": 100,
                "verdict": T.DIVERGENT,
                "allowed": False,
                "lag_exceeded": False,
                "first_diff": 42.0,
                "detail": json.dumps({"firstDifferingOffset": 42, "differingBytes": 1}),
            },
        ]
    return {
        "runId": "r1",
        "cluster": "c1",
        "brokerName": name,
        "master": f"{name}-0",
        "status": T.RUN_FAILED if failing else T.RUN_PASSED,
        "passed": not failing,
        "counts": {T.DIVERGENT: 1} if failing else {T.MATCH: 2},
        "bytes": {T.DIVERGENT: 100} if failing else {T.MATCH: 2048},
        "checks": checks,
        "findings": findings,
        "witnesses": {
            "divergent": [
                {"pair": f"{name}-0->{name}-1", "master_record": {"topic": "T", "queueId": 3}}
            ]
        },
    }


def _run(groups: list[dict], with_gx: bool) -> tuple[dict, dict]:
    summary = {
        "runId": "r1",
        "cluster": "c1",
        "status": T.combine_runs([g["status"] for g in groups]),
        "groupVerdicts": groups,
    }
    gx = (
        [
            {
                "brokerName": g["brokerName"],
                "success": True,
                "failedSuites": [],
                "reportUrl": "file:///x/index.html",
            }
            for g in groups
        ]
        if with_gx
        else []
    )
    doc = {
        "status": summary["status"],
        "passed": all(g["passed"] for g in groups),
        "expectations": gx,
        "reports": {g["brokerName"]: "file:///x/report.html" for g in groups},
    }
    return summary, doc


@pytest.mark.parametrize("with_gx", [True, False])
@pytest.mark.parametrize("n_groups", [1, 2, 3])
def test_one_shape_for_any_number_of_groups(n_groups, with_gx):
    groups = [_verdict(f"broker-{i}", failing=i == 1) for i in range(n_groups)]
    doc = audit_document(*_run(groups, with_gx))
    schemas.validate(doc, "audit")
    # the jq path .groups[].checks[] finds every check, one group or many
    assert len([c for g in doc["groups"] for c in g["checks"]]) == n_groups * len(T.CHECKS)
    assert [g["name"] for g in doc["groups"]] == [g["brokerName"] for g in groups]
    assert doc["schemaVersion"] == 1 and doc["command"] == "audit"
    if n_groups > 1:
        (bad,) = [c for c in doc["groups"][1]["checks"] if c["status"] == "fail"]
        assert bad["first"] == {"offset": 42, "node": "broker-1-1", "topic": "T", "queue": 3}
        assert where_text(bad["first"]) == "; first at offset 42 topic T queue 3 node broker-1-1"
        # one differing byte, not the range's 100
        assert doc["groups"][1]["ranges"] == {
            "divergent": {"count": 1, "bytes": 100, "differingBytes": 1}
        }
    assert all(c["first"] is None for g in doc["groups"] for c in g["checks"] if c["passed"])


def test_schema_refuses_the_old_shapes():
    old_one = {"runId": "r1", "status": "PASSED", "passed": True, "checks": []}
    old_many = {**old_one, "groupVerdicts": [{"checks": []}]}
    for doc in (old_one, old_many):
        with pytest.raises(ValidationError):
            schemas.validate(doc, "audit")
