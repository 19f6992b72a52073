"""The audit's checks as OpenLineage assertions (pipeline/lineage.py): dataset names by
OpenLineage's naming conventions, one assertion per check. The events themselves are read from
real DAG runs in test_dag_runs.py."""

from __future__ import annotations

from pipeline.lineage import audit_assertions, dataset_of


def test_dataset_names_follow_openlineage_conventions():
    assert dataset_of("s3://bkt/arch/", "rmq", "broker-a") == ("s3://bkt", "arch/v1/rmq/broker-a")
    assert dataset_of("s3://bkt", "rmq", "broker-a") == ("s3://bkt", "v1/rmq/broker-a")
    assert dataset_of("file:///data/a", "rmq", "b") == ("file", "/data/a/v1/rmq/b")
    assert dataset_of("/data/a/", "rmq", "b") == ("file", "/data/a/v1/rmq/b")


def test_one_assertion_per_check_with_its_success():
    summary = {
        "groups": [
            {
                "brokerName": "broker-a",
                "checks": [
                    {
                        "name": "log_integrity",
                        "status": "fail",
                        "passed": False,
                        "findings": 1,
                        "detail": "crc at 4242",
                    },
                    {"name": "delivery", "status": "pass", "passed": True, "findings": 0},
                ],
            },
            {"brokerName": "broker-b", "checks": []},
        ]
    }
    a, b = audit_assertions("file:///r", "rmq", summary)
    assert (a.namespace, a.name) == ("file", "/r/v1/rmq/broker-a")
    assert [(x.assertion, x.success, x.column, x.severity) for x in a.assertions] == [
        ("log_integrity", False, None, "error"),
        ("delivery", True, None, "warn"),
    ]
    assert a.assertions[0].description == "crc at 4242"
    assert a.assertions[0].actual == "1 finding(s), status fail"
    assert b.assertions == ()
