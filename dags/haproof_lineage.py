"""The audit task's OpenLineage facets (not a DAG file: listed in .airflowignore).

Airflow's OpenLineage provider (apache-airflow-providers-openlineage) emits a START and a
COMPLETE or FAIL event for every task when a transport is configured (``[openlineage]
transport``, e.g. ``AIRFLOW__OPENLINEAGE__TRANSPORT='{"type": "http", "url":
"http://marquez:5000"}'``; docs/operations.md). For an operator with
``get_openlineage_facets_on_complete`` / ``..._on_failure`` its ``DefaultExtractor`` asks the
operator for its datasets: :class:`AuditOperator` (the ``audit`` task of every haproof DAG)
answers with each audited group's archive as an input dataset carrying the run's checks as
a ``DataQualityAssertionsDatasetFacet`` (one assertion per check, ``success`` whether it
passed: ``pipeline.lineage``), on success and on failure alike (a failed check fails the task).

The checks are handed over in memory: the task's callable gives them to the operator
(:func:`record_checks`) before it returns or fails, and the provider's listener, which runs in
the same task process (forked or on a thread after the task), reads them from it: no XCom to
fetch from the listener.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk.bases.decorator import task_decorator_factory


class AuditOperator(_PythonDecoratedOperator):
    """``@task`` whose OpenLineage events carry the audit's checks as assertions."""

    #: ``pipeline.lineage.CheckedDataset`` of this run, set by the callable
    checked: list | None = None

    def get_openlineage_facets_on_complete(self, task_instance):
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance):
        return self._lineage()

    def _lineage(self):
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import InputDataset
        from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq

        inputs = [
            InputDataset(
                namespace=d.namespace,
                name=d.name,
                inputFacets={
                    "dataQualityAssertions": dq.DataQualityAssertionsDatasetFacet(
                        assertions=[
                            dq.Assertion(
                                assertion=a.assertion,
                                success=a.success,
                                column=a.column,
                                severity=a.severity,
                                description=a.description,
                                actual=a.actual,
                            )
                            for a in d.assertions
                        ]
                    )
                },
            )
            for d in self.checked or []
        ]
        return OperatorLineage(inputs=inputs)


def audit_task(**kwargs: Any):
    """``@task(**kwargs)`` whose task reports the audit's checks to OpenLineage."""
    return task_decorator_factory(decorated_operator_class=AuditOperator, **kwargs)


def record_checks(ti, cfg: dict, summary: dict) -> None:
    """Inside the audit task: give the run's checks to its operator for the lineage events."""
    from pipeline.lineage import audit_assertions

    task = getattr(ti, "task", None)
    if isinstance(task, AuditOperator):
        task.checked = audit_assertions(cfg["root"], cfg["cluster"], summary)
