"""What an audit run says when it fails: the verdict line a failed task shows, the failed checks,
and the alert sent to people (a webhook's JSON and an e-mail's text).

The alert's JSON (a POST to the webhook), one object::

    {"status": "FAILED", "cluster": "prod", "groups": ["broker-a"], "runId": "2026...-ab12cd",
     "failedChecks": [{"group": "broker-a", "check": "log_integrity", "status": "FAIL",
                       "findings": 1, "detail": "..."}],
     "reportUrl": "s3://.../report.html", "dagRunUrl": "http://airflow/dags/.../runs/..."}

``failedChecks`` lists the audit's checks that did not pass (``FAIL``, or ``NO_EVIDENCE`` in a
run that requires evidence) and the expectations suites that failed (``check``:
``expectations:{suite}``). A run that failed before it judged anything has ``runId`` null and no
groups. Airflow's side (where the webhook and the recipients come from) is
``dags/haproof_alerts.py``; this module imports nothing of Airflow.
"""

from __future__ import annotations

import html
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlparse

from contracts import audit_tables as T
from contracts.errors import HaproofError

#: how long a webhook may take to answer, and how much of its answer is read
WEBHOOK_TIMEOUT_S = 10.0
WEBHOOK_REPLY_MAX_BYTES = 4096
#: the findings' detail shown per failed check (a webhook body stays small)
DETAIL_MAX_CHARS = 300


class AlertError(HaproofError):
    """An alert could not be delivered (the webhook refused it or could not be reached)."""


def failed_checks(audit: dict[str, Any] | None, gx: list[dict] | None) -> list[dict[str, Any]]:
    """The checks and suites that did not pass, group by group, in the audit's order."""
    out: list[dict[str, Any]] = []
    for g in (audit or {}).get("groups", []):
        for c in g["checks"]:
            if not c.get("passed", c["status"] == T.STATUS_PASS):
                out.append(
                    {
                        "group": g["brokerName"],
                        "check": c["name"],
                        "status": c["status"],
                        "findings": c.get("findings", 0),
                        "detail": str(c.get("detail") or "")[:DETAIL_MAX_CHARS],
                    }
                )
    for r in gx or []:
        for suite in r.get("failedSuites", []):
            out.append(
                {
                    "group": r["brokerName"],
                    "check": f"expectations:{suite}",
                    "status": T.STATUS_FAIL,
                    "findings": None,
                    "detail": f"suite {suite} failed; Data Docs: {r.get('reportUrl', '')}",
                }
            )
    return out


def verdict_line(audit: dict[str, Any]) -> str:
    """One line for a failed audit task: the run, its status, and each check that failed."""
    failed = failed_checks(audit, None)
    parts = [
        f"{f['group']} {f['check']} {f['status']} ({f['findings']} finding(s))"
        + (f": {f['detail']}" if f["detail"] else "")
        for f in failed
    ]
    return f"audit {audit['runId']} {audit['status']}: " + ("; ".join(parts) or "no check failed")


def alert_payload(
    *,
    status: str,
    cluster: str | None,
    audit: dict[str, Any] | None,
    gx: list[dict] | None,
    report_url: str | None,
    dag_run_url: str | None,
) -> dict[str, Any]:
    """The webhook's JSON (module docstring)."""
    return {
        "status": status,
        "cluster": cluster,
        "groups": [g["brokerName"] for g in (audit or {}).get("groups", [])],
        "runId": (audit or {}).get("runId"),
        "failedChecks": failed_checks(audit, gx),
        "reportUrl": report_url,
        "dagRunUrl": dag_run_url,
    }


def check_webhook_url(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise AlertError(f"alert webhook {url!r}: not an http(s) URL with a host")
    return url


def post_webhook(
    url: str,
    payload: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = WEBHOOK_TIMEOUT_S,
) -> int:
    """POST ``payload`` as JSON; the HTTP status (2xx), else :class:`AlertError`."""
    body = json.dumps(payload, sort_keys=True).encode()
    req = urllib.request.Request(
        check_webhook_url(url),
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (checked)
            resp.read(WEBHOOK_REPLY_MAX_BYTES)
            return resp.status
    except urllib.error.HTTPError as exc:
        raise AlertError(f"alert webhook {url} answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise AlertError(f"alert webhook {url} unreachable: {exc}") from exc


def email_subject(payload: dict[str, Any]) -> str:
    groups = ", ".join(payload["groups"]) or "no group"
    return f"haproof audit {payload['status']}: {payload['cluster']} ({groups})"


def email_html(payload: dict[str, Any]) -> str:
    """The e-mail's body: the run, the failed checks, the report and the DAG run's links.
    Plain text in HTML, escaped; no template syntax (Airflow renders notifiers' fields)."""
    e = html.escape

    def link(url: str | None) -> str:
        return f'<a href="{e(url)}">{e(url)}</a>' if url else "(none)"

    rows = "".join(
        f"<li>{e(f['group'])}: {e(f['check'])} {e(f['status'])}"
        + (f" ({f['findings']} finding(s))" if f["findings"] is not None else "")
        + (f" &mdash; {e(f['detail'])}" if f["detail"] else "")
        + "</li>"
        for f in payload["failedChecks"]
    )
    body = (
        f"<p>haproof audit run {e(str(payload['runId']))} of cluster "
        f"{e(str(payload['cluster']))}: <b>{e(payload['status'])}</b></p>"
        f"<ul>{rows or '<li>the run failed before judging any check</li>'}</ul>"
        f"<p>Report: {link(payload['reportUrl'])}</p>"
        f"<p>Airflow run: {link(payload['dagRunUrl'])}</p>"
    )
    return body.replace("{", "&#123;").replace("}", "&#125;")
