"""The "Audit report" extra link on the task that builds a run's reports (not a DAG file: listed
in .airflowignore).

How Airflow 3 shows an extra link (read from its task SDK and API server): when a task ends,
in success or failure, the worker's task runner (``finalize``) calls ``get_link`` of each link
the operator declares in ``operator_extra_links`` and stores the URL as an XCom under the link's
``xcom_key``; the serialized DAG keeps only ``{name: xcom_key}``, and the API server answers
``GET .../taskInstances/{task_id}/links`` by reading that XCom back. A link the operator itself
declares therefore needs no plugin on the API server (plugins' ``operator_extra_links`` add
links to operators that do not declare them).

The report task pushes the URL of the report to open under :data:`REPORT_URL_XCOM` before it
publishes (so a failing run has its link too); the link reads it back on the worker.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk import BaseOperatorLink
from airflow.sdk.bases.decorator import task_decorator_factory

REPORT_URL_XCOM = "haproof_report_url"


class AuditReportLink(BaseOperatorLink):
    """The run's report.html (file:// or the object store's URL, as the task log shows)."""

    name = "Audit report"

    def get_link(self, operator, *, ti_key) -> str:
        pull = getattr(ti_key, "xcom_pull", None)  # the worker's RuntimeTaskInstance
        if pull is None:
            return ""
        return pull(task_ids=ti_key.task_id, key=REPORT_URL_XCOM) or ""


class AuditReportOperator(_PythonDecoratedOperator):
    """``@task`` with the "Audit report" link (Airflow's own ``@task`` operator otherwise)."""

    operator_extra_links = (AuditReportLink(),)


def report_task(**kwargs: Any):
    """``@task(**kwargs)`` whose task shows the "Audit report" link."""
    return task_decorator_factory(decorated_operator_class=AuditReportOperator, **kwargs)


def link_target(reports: dict[str, str], audit: dict, gx: list[dict]) -> str | None:
    """The one report the link opens: the first group (by name) that failed a check or a suite,
    else the first group; ``None`` when no report was written."""
    if not reports:
        return None
    failed_suites = {r["brokerName"] for r in gx if not r["success"]}
    failing = sorted(
        g["brokerName"]
        for g in audit["groups"]
        if g["brokerName"] in reports and (not g["passed"] or g["brokerName"] in failed_suites)
    )
    return reports[failing[0] if failing else min(reports)]


def share_report_url(reports: dict[str, str], audit: dict, gx: list[dict]) -> str | None:
    """Push the link's URL for the running task instance (from inside the task)."""
    from airflow.sdk import get_current_context

    url = link_target(reports, audit, gx)
    if url:
        get_current_context()["ti"].xcom_push(REPORT_URL_XCOM, url)
    return url
