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
