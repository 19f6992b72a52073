"""The OpenLineage events of a DAG run, through the provider's file transport (one JSON event a
line), for the DAG tests."""

from __future__ import annotations

import json
from pathlib import Path


def lineage_env(path: Path) -> dict[str, str]:
    """Airflow's environment for the OpenLineage provider writing its events to ``path``."""
    transport = {"type": "file", "log_file_path": str(path), "append": True}
    return {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "haproof-tests",
    }


def task_events(path: Path, dag_id: str, task_id: str) -> list[dict]:
    """The task's COMPLETE / FAIL events, in the order written."""
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [
        e
        for e in events
        if e.get("job", {}).get("name") == f"{dag_id}.{task_id}"
        and e.get("eventType") in ("COMPLETE", "FAIL")
    ]


def assertions_of(event: dict) -> dict[str, list[dict]]:
    """{dataset name: its data-quality assertions} of an event's inputs."""
    return {
        d["name"]: d.get("inputFacets", {}).get("dataQualityAssertions", {}).get("assertions", [])
        for d in event.get("inputs", [])
    }


def assert_audit_lineage(
    path: Path, dag_id: str, event_type: str, root_dir: Path, group: dict, runs: int = 1
) -> list[dict]:
    """The audit task's one OpenLineage event about ``group`` (a group of a published
    ``dag_report.json``), among the ``runs`` events of the DAG's audit tasks in the file: the
    group's archive as its only input, with one assertion per check of the verdict and that
    check's success; its assertions."""
    name = f"{root_dir}/v1/rmq/{group['brokerName']}"
    events = task_events(path, dag_id, "audit")
    assert len(events) == runs, [e["eventType"] for e in events]
    (event,) = [e for e in events if name in assertions_of(e)]
    assert event["eventType"] == event_type
    (dataset,) = event["inputs"]
    assert dataset["namespace"] == "file"
    assertions = assertions_of(event)[name]
    assert [(a["assertion"], a["success"]) for a in assertions] == [
        (c["name"], c["passed"]) for c in group["checks"]
    ]
    assert all(a.get("column") is None for a in assertions)  # the whole archive, no column
    return assertions
