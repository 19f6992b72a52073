"""Alerts for a failed audit run (not a DAG file: listed in .airflowignore).

:class:`AuditAlertNotifier` is the ``on_failure_callback`` of each audit DAG's ``report`` task,
the task that always runs last (trigger rule ``all_done``) and fails whenever the run fails, so
every failed run alerts once, with what its tasks left behind (the audit's summary, the failed
suites, the report's URL) read back from their XComs. Two channels, each optional, each tried
even when the other fails:

- **webhook**: a POST of the JSON of :mod:`pipeline.alerts` to the Airflow HTTP Connection
  ``haproof_alerts`` (its ``host`` either a full base URL ``https://hooks.example`` or a host
  name with ``schema`` http/https and ``port``; ``extra`` ``{"endpoint": "/path",
  "headers": {...}}``; a ``password``, if set, is sent as ``Authorization: Bearer``), else to
  ``HAPROOF_ALERT_WEBHOOK_URL``;
- **e-mail**: Airflow's SMTP notifier (``apache-airflow-providers-smtp``) to
  ``HAPROOF_ALERT_EMAIL`` (comma-separated), over the SMTP Connection ``HAPROOF_ALERT_SMTP_CONN``
  (default: Airflow's ``[email] email_conn_id``, ``smtp_default``), from
  ``HAPROOF_ALERT_FROM`` (default: the connection's ``from_email``).

Nothing of the project is imported until a callback runs.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from airflow.sdk import BaseNotifier

log = logging.getLogger(__name__)

ALERTS_CONN_ID = "haproof_alerts"
SUMMARY_XCOM = "audit_summary"  # the audit task's compact summary, pushed before it may fail
GX_XCOM = "expectations_results"  # the expectations task's results, likewise


def webhook_target(conn_id: str = ALERTS_CONN_ID) -> tuple[str, dict[str, str]] | None:
    """(URL, headers) of the webhook: the Connection, else the environment, else None."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # AirflowNotFoundException: no such connection
        conn = None
    if conn is not None and conn.host:
        if "://" in conn.host:
            base = conn.host.rstrip("/")
        else:
            base = f"{conn.schema or 'http'}://{conn.host}" + (f":{conn.port}" if conn.port else "")
        extra = conn.extra_dejson or {}
        endpoint = str(extra.get("endpoint", ""))
        headers = {str(k): str(v) for k, v in dict(extra.get("headers") or {}).items()}
        if conn.password:
            headers["Authorization"] = f"Bearer {conn.password}"
        return base + (endpoint if not endpoint or endpoint.startswith("/") else "/" + endpoint), (
            headers
        )
    url = os.environ.get("HAPROOF_ALERT_WEBHOOK_URL")
    return (url, {}) if url else None


def dag_run_url(context: dict[str, Any]) -> str | None:
    """The run's page in Airflow's UI (``[api] base_url``)."""
    from urllib.parse import quote

    from airflow.sdk import conf

    run = context.get("dag_run")
    if run is None:
        return None
    base = conf.get("api", "base_url", fallback="http://localhost:8080").rstrip("/")
    return f"{base}/dags/{quote(run.dag_id, safe='')}/runs/{quote(run.run_id, safe='')}"


def payload_of(context: dict[str, Any]) -> dict[str, Any]:
    """The alert (``pipeline.alerts.alert_payload``) from the failed run's XComs."""
    from haproof_report_link import REPORT_URL_XCOM

    from pipeline.alerts import alert_payload

    ti = context["ti"]
    audit = ti.xcom_pull(task_ids="audit", key=SUMMARY_XCOM)
    gx = ti.xcom_pull(task_ids="expectations", key=GX_XCOM)
    cfg = ti.xcom_pull(task_ids="resolve") or {}
    return alert_payload(
        status="FAILED",
        cluster=cfg.get("cluster"),
        audit=audit,
        gx=gx,
        report_url=ti.xcom_pull(task_ids=ti.task_id, key=REPORT_URL_XCOM),
        dag_run_url=dag_run_url(context),
    )


class AuditAlertNotifier(BaseNotifier):
    """Webhook and e-mail for a failed audit run (module docstring)."""

    template_fields = ()

    def notify(self, context: dict[str, Any]) -> None:
        from pipeline.alerts import email_html, email_subject, post_webhook

        payload = payload_of(context)
        errors = []
        target = webhook_target()
        if target is not None:
            try:
                status = post_webhook(target[0], payload, headers=target[1])
                log.info("alert posted to %s (HTTP %d)", target[0], status)
            except Exception as exc:
                errors.append(exc)
                log.error("alert webhook failed: %s", exc)
        to = [a.strip() for a in os.environ.get("HAPROOF_ALERT_EMAIL", "").split(",") if a.strip()]
        if to:
            from airflow.providers.smtp.notifications.smtp import SmtpNotifier

            mail = SmtpNotifier(
                to=to,
                from_email=os.environ.get("HAPROOF_ALERT_FROM") or None,
                subject=email_subject(payload),
                html_content=email_html(payload),
                smtp_conn_id=os.environ.get("HAPROOF_ALERT_SMTP_CONN") or None,
            )
            try:
                mail(context)
                log.info("alert e-mailed to %s", ", ".join(to))
            except Exception as exc:
                errors.append(exc)
                log.error("alert e-mail failed: %s", exc)
        if target is None and not to:
            log.warning(
                "audit run failed and no alert is configured (Connection %s, "
                "HAPROOF_ALERT_WEBHOOK_URL, HAPROOF_ALERT_EMAIL)",
                ALERTS_CONN_ID,
            )
        if errors:
            raise errors[0]
