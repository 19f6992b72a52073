"""The evidence report: one self-contained ``report.html`` per audit run and broker group.

``build_and_publish_report(store, run_id, broker_name)`` reads the group's audit outputs
(``audits/{runId}/{brokerName}/``: the Parquet tables of ``contracts.audit_tables`` and
``verdict.json``) and the group's archived snapshots and events, renders the page (inline CSS and
SVG, no request leaves the file) and writes it to ``audits/{runId}/{brokerName}/report.html``.
Missing or partial outputs never raise: the page says "incomplete run" and names what is missing.
"""

from __future__ import annotations

from expectations.evidence.publish import REPORT_NAME, build_and_publish_report, report_key

__all__ = ["REPORT_NAME", "build_and_publish_report", "report_key"]
