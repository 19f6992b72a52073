"""Alerts of a failed audit run: the payload, the webhook POST and the e-mail, delivered to real
local HTTP and SMTP servers by the notifier the DAGs use (its context here is a unit test's: the
XComs the audit, expectations and report tasks push; the real DAG run is test_dag_runs.py's)."""

from __future__ import annotations

import json
import sys

import pytest

from pipeline.alerts import AlertError, alert_payload, email_html, post_webhook, verdict_line
from tests.dags.alert_servers import SmtpServer, WebhookServer, html_of, wait_for
from tests.dags.conftest import DAGS

sys.path.insert(0, str(DAGS))  # as the DAG processor does: the dags folder on sys.path

AUDIT = {
    "runId": "20261126T020000Z-abc123",
    "status": "FAILED",
    "passed": False,
    "groups": [
        {
            "brokerName": "broker-a",
            "status": "FAILED",
            "passed": False,
            "checks": [
                {
                    "name": "replica_consistency",
                    "status": "pass",
                    "passed": True,
                    "findings": 0,
                    "detail": "",
                },
                {
                    "name": "log_integrity",
                    "status": "fail",
                    "passed": False,
                    "findings": 1,
                    "detail": "1 corrupt record at 16900 {{ evil }}",
                },
            ],
        }
    ],
}
GX = [
    {
        "brokerName": "broker-a",
        "success": False,
        "failedSuites": ["haproof_records_issues"],
        "reportUrl": "file:///r/audits/x/broker-a/report/index.html",
    },
]
REPORT = "file:///r/audits/20261126T020000Z-abc123/broker-a/report.html"


class _TI:
    task_id = "report"

    def xcom_pull(self, task_ids, key="return_value"):
        return {
            ("audit", "audit_summary"): AUDIT,
            ("expectations", "expectations_results"): GX,
            ("resolve", "return_value"): {"cluster": "prod"},
            ("report", "haproof_report_url"): REPORT,
        }.get((task_ids, key))


class _Run:
    dag_id = "haproof_nightly_audit"
    run_id = "scheduled__2026-11-26T02:00:00+00:00"


def test_payload_names_the_failed_checks_and_suites():
    p = alert_payload(
        status="FAILED",
        cluster="prod",
        audit=AUDIT,
        gx=GX,
        report_url=REPORT,
        dag_run_url="http://af/dags/d/runs/r",
    )
    assert set(p) == {
        "status",
        "cluster",
        "groups",
        "runId",
        "failedChecks",
        "reportUrl",
        "dagRunUrl",
    }
    assert p["groups"] == ["broker-a"] and p["runId"] == AUDIT["runId"]
    assert [(f["group"], f["check"], f["status"]) for f in p["failedChecks"]] == [
        ("broker-a", "log_integrity", "fail"),
        ("broker-a", "expectations:haproof_records_issues", "fail"),
    ]
    line = verdict_line(AUDIT)
    assert line.startswith(f"audit {AUDIT['runId']} FAILED: broker-a log_integrity fail (1 ")
    assert "replica_consistency" not in line
    # a run that failed before judging: no run id, no group, still an alert
    empty = alert_payload(
        status="FAILED", cluster="prod", audit=None, gx=None, report_url=None, dag_run_url=None
    )
    assert empty["runId"] is None and empty["groups"] == [] and empty["failedChecks"] == []
    assert "{" not in email_html(p)  # nothing Airflow's template rendering would evaluate


def test_webhook_errors_say_what_and_where():
    with WebhookServer(status=500) as hook:
        with pytest.raises(AlertError, match="answered HTTP 500"):
            post_webhook(hook.url(), {"a": 1})
    with pytest.raises(AlertError, match="not an http"):
        post_webhook("file:///etc/passwd", {})
    with pytest.raises(AlertError, match="unreachable"):
        post_webhook(f"http://127.0.0.1:{hook.port}/gone", {}, timeout_s=2)


@pytest.mark.parametrize("via", ["connection", "environment"])
def test_notifier_posts_the_webhook_and_mails_the_report_link(monkeypatch, via):
    from haproof_alerts import AuditAlertNotifier

    with WebhookServer() as hook, SmtpServer() as smtp:
        if via == "connection":
            conn = {
                "conn_type": "http",
                "host": f"http://127.0.0.1:{hook.port}",
                "password": "s3cret",
                "extra": {"endpoint": "/hook"},
            }
            monkeypatch.setenv("AIRFLOW_CONN_HAPROOF_ALERTS", json.dumps(conn))
        else:
            monkeypatch.delenv("AIRFLOW_CONN_HAPROOF_ALERTS", raising=False)
            monkeypatch.setenv("HAPROOF_ALERT_WEBHOOK_URL", hook.url())
        monkeypatch.setenv("AIRFLOW_CONN_HAPROOF_SMTP", smtp.connection_json())
        monkeypatch.setenv("HAPROOF_ALERT_SMTP_CONN", "haproof_smtp")
        monkeypatch.setenv("HAPROOF_ALERT_EMAIL", "oncall@example.com, dba@example.com")
        AuditAlertNotifier()({"ti": _TI(), "dag_run": _Run()})
        wait_for(lambda: hook.posts and smtp.messages, what="the webhook and the e-mail")
    (post,) = hook.posts
    assert post["path"] == "/hook"
    if via == "connection":
        assert post["headers"]["Authorization"] == "Bearer s3cret"
    body = post["json"]
    assert body["status"] == "FAILED" and body["cluster"] == "prod"
    assert body["reportUrl"] == REPORT and body["runId"] == AUDIT["runId"]
    assert body["dagRunUrl"].endswith(
        "/dags/haproof_nightly_audit/runs/scheduled__2026-11-26T02%3A00%3A00%2B00%3A00"
    )
    (msg,) = smtp.messages
    assert smtp.envelopes[0][1] == ["oncall@example.com", "dba@example.com"]
    assert msg["Subject"] == "haproof audit FAILED: prod (broker-a)"
    text = html_of(msg)
    assert f'href="{REPORT}"' in text and "log_integrity" in text
    assert "{{ evil }}" not in text and "evil" in text  # shown, escaped, never rendered
