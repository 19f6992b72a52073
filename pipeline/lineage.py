"""What an audit run says to a lineage server: each audited group's archive as a dataset, and
each of its checks as a data-quality assertion on it (OpenLineage's
``DataQualityAssertionsDatasetFacet``: one assertion per check, ``success`` whether it passed).

Plain values only (no OpenLineage or Airflow import): ``dags/haproof_lineage.py`` turns them into
the OpenLineage provider's objects on the audit task, which Airflow's OpenLineage listener
emits with the task's COMPLETE or FAIL event. Dataset names follow OpenLineage's naming
conventions: ``s3://bucket/prefix`` → namespace ``s3://bucket``, name
``prefix/v1/{cluster}/{group}``; ``file:///path`` → namespace ``file``, name
``/path/v1/{cluster}/{group}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from contracts import archive_layout as layout
from contracts import audit_tables as T


@dataclass(frozen=True)
class Assertion:
    """One check of one group: OpenLineage's ``Assertion`` fields."""

    assertion: str  # the check's name (contracts.audit_tables.CHECKS)
    success: bool
    column: str | None = None  # a check judges the whole archive, not a column
    severity: str = "error"  # "warn" for an informational check (delivery)
    description: str = ""
    actual: str = ""  # findings


@dataclass(frozen=True)
class CheckedDataset:
    namespace: str
    name: str
    assertions: tuple[Assertion, ...]


def dataset_of(root: str, cluster: str, group: str) -> tuple[str, str]:
    """(namespace, name) of a group's archive under ``root``."""
    parts = urlsplit(root)
    if parts.scheme == "s3":
        prefix = parts.path.strip("/")
        key = layout.group_prefix(cluster, group).rstrip("/")
        return f"s3://{parts.netloc}", f"{prefix}/{key}" if prefix else key
    path = (parts.path if parts.scheme else root).rstrip("/")
    return "file", f"{path}/{layout.group_prefix(cluster, group).rstrip('/')}"


def audit_assertions(root: str, cluster: str, summary: dict[str, Any]) -> list[CheckedDataset]:
    """The checks of a compact audit summary (``pipeline.steps.compact``), per group."""
    out = []
    for group in summary["groups"]:
        namespace, name = dataset_of(root, cluster, group["brokerName"])
        checks = tuple(
            Assertion(
                assertion=c["name"],
                success=bool(c["passed"]),
                severity="warn" if c["name"] in T.INFORMATIONAL_CHECKS else "error",
                description=str(c.get("detail") or c.get("status") or ""),
                actual=f"{int(c.get('findings') or 0)} finding(s), status {c.get('status')}",
            )
            for c in group["checks"]
        )
        out.append(CheckedDataset(namespace, name, checks))
    return out
