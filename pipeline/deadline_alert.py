"""The continuous verification DAG's deadline callback (an Airflow ``AsyncCallback``, run by the
triggerer): imports nothing of the project until it runs, since Airflow imports the callback's
module when it parses the DAG file."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

log = logging.getLogger(__name__)


def _run_url(dag_id: str | None, run_id: str | None) -> str | None:
    if not dag_id or not run_id:
        return None
    from urllib.parse import quote

    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="http://localhost:8080").rstrip("/")
    return f"{base}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


async def deadline_missed(context: dict | None = None, **kwargs: Any) -> None:
    """The continuous DAG's ``DeadlineAlert`` callback (in the triggerer): a run did not finish
    within the lag bound, so verification has stopped; POST the alert to
    ``HAPROOF_ALERT_WEBHOOK_URL`` (or ``kwargs["webhook_url"]``)."""
    from pipeline.alerts import alert_payload, post_webhook

    url = kwargs.get("webhook_url") or os.environ.get("HAPROOF_ALERT_WEBHOOK_URL")
    run = (context or {}).get("dag_run") or {}
    run = run if isinstance(run, dict) else {}
    run_id = run.get("dag_run_id") or run.get("run_id")
    payload = alert_payload(
        status="DEADLINE_MISSED",
        cluster=kwargs.get("cluster"),
        audit=None,
        gx=None,
        report_url=None,
        dag_run_url=_run_url(run.get("dag_id"), run_id),
    )
    payload["detail"] = (
        f"verification run {run_id} did not finish within {kwargs.get('bound_s')} s: "
        "the verification lag is past its bound"
    )
    log.error("%s", payload["detail"])
    if url:
        await asyncio.to_thread(post_webhook, url, payload)
