"""Build a group's report and publish it beside the audit outputs (the pipeline's hook)."""

from __future__ import annotations

import logging
import time

from expectations.evidence.checks import check_views, run_status
from expectations.evidence.model import group_prefix, load_run
from expectations.evidence.render import headline, render

log = logging.getLogger(__name__)

REPORT_NAME = "report.html"


def report_key(run_id: str, broker_name: str) -> str:
    return f"{group_prefix(run_id, broker_name)}{REPORT_NAME}"


def build_report(store, run_id: str, broker_name: str) -> tuple[bytes, dict]:
    """The page's bytes and what it took: {status, incomplete, seconds, bytes}."""
    t0 = time.monotonic()
    ev = load_run(store, run_id, broker_name)
    html = render(ev).encode()
    stats = {
        "status": run_status(ev, check_views(ev)),
        "headline": headline(ev, run_status(ev, check_views(ev)))[0],
        "missing": list(ev.missing),
        "empty": ev.empty,
        "seconds": round(time.monotonic() - t0, 3),
        "bytes": len(html),
    }
    return html, stats


def build_and_publish_report(store, run_id: str, broker_name: str) -> str:
    """Render ``audits/{runId}/{brokerName}/report.html`` from the run's outputs and write it;
    returns its key. Missing outputs make an "incomplete run" page, never an exception."""
    html, stats = build_report(store, run_id, broker_name)
    key = report_key(run_id, broker_name)
    store.put_mutable(key, html)
    log.info(
        "evidence report %s: %s, %d bytes in %.2f s%s",
        key,
        stats["headline"],
        stats["bytes"],
        stats["seconds"],
        f" ({len(stats['missing'])} output(s) missing)" if stats["missing"] else "",
    )
    return key
