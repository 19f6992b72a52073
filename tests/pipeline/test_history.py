"""The audit history: rows from the runs' verdicts, ``haproof audit history`` (table and --json)
as a subprocess, and the index page in headless Debian Chromium (offline, opened from disk)."""

from __future__ import annotations

import json
import subprocess

import pytest

from contracts import archive_layout as layout
from contracts.object_store import open_store
from pipeline.history import collect_history, history_page_key, publish_history
from tests.report.browser import browser_context, ink, open_page, screenshot
from tests.support.haproof_cli import audit

CHECKS = (
    "archive_integrity",
    "replica_consistency",
    "acknowledged_durability",
    "log_integrity",
    "offset_monotonicity",
)


def _group_verdict(run_id: str, group: str, night: int, failed: bool) -> dict:
    checks = [
        {
            "name": c,
            "status": "fail" if failed and c == "log_integrity" else "pass",
            "findings": 2 if failed and c == "log_integrity" else 0,
            "evidence": 10,
        }
        for c in CHECKS
    ]
    return {
        "runId": run_id,
        "cluster": "prod",
        "brokerName": group,
        "window": {"since": None, "until": None},
        "status": "FAILED" if failed else "PASSED",
        "passed": not failed,
        "counts": {"match": 3, "lag": 1},
        "bytes": {"match": (night + 1) * 1_000_000, "lag": 4096 * night, "unverifiable": 512},
        "checks": checks,
        "seconds": 10.0 + night,
        "recordsChecked": 100 * night,
    }


def write_nights(store, nights: int = 5, groups=("broker-a", "broker-b")) -> list[str]:
    """``nights`` nightly runs of two groups (the fourth night's broker-b failed), one run of
    another cluster and one that never finished."""
    ids = []
    for n in range(nights):
        run_id = f"202611{20 + n:02d}T020000Z-{n:06x}"
        ids.append(run_id)
        verdicts = [_group_verdict(run_id, g, n, n == 3 and g == "broker-b") for g in groups]
        for v in verdicts:
            store.put_mutable(
                layout.audit_verdict_key(run_id, v["brokerName"]), json.dumps(v).encode()
            )
        run = {
            "runId": run_id,
            "cluster": "prod",
            "brokerName": None,
            "groups": list(groups),
            "status": "FAILED" if n == 3 else "PASSED",
        }
        store.put_mutable(layout.audit_verdict_key(run_id), json.dumps(run).encode())
    other = "20261125T020000Z-ffffff"
    store.put_mutable(
        layout.audit_verdict_key(other),
        json.dumps({**_group_verdict(other, "broker-x", 1, False), "cluster": "staging"}).encode(),
    )
    store.put_mutable(f"audits/20261126T020000Z-000000/broker-a/{layout.REPORT_NAME}", b"<html>")
    return ids


@pytest.fixture
def root(tmp_path):
    store = open_store(f"file://{tmp_path}/r")
    return store, write_nights(store)


def test_rows_newest_first_per_group(root):
    store, ids = root
    hist = collect_history(store, "prod")
    assert [(r["runId"], r["group"]) for r in hist.rows] == [
        (i, g) for i in reversed(ids) for g in ("broker-a", "broker-b")
    ]
    bad = next(r for r in hist.rows if r["runId"] == ids[3] and r["group"] == "broker-b")
    assert bad["status"] == "FAILED" and bad["checks"]["log_integrity"] == "fail"
    assert bad["findings"] == 2 and bad["lagBytes"] == 3 * 4096 and bad["blindBytes"] == 512
    assert bad["at"] == 1_795_399_200_000  # 2026-11-23T02:00Z, from the run id
    assert hist.skipped == ["20261126T020000Z-000000: no verdict.json (a run that did not finish)"]
    assert [r["runId"] for r in collect_history(store, "prod", last=2).rows] == [
        ids[4],
        ids[4],
        ids[3],
        ids[3],
    ]
    assert [r["group"] for r in collect_history(store, "staging").rows] == ["broker-x"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return audit("history", *args, timeout_s=120)[0]


def test_cli_table_and_json(root):
    store, ids = root
    res = _cli("--root", store.root, "--cluster", "prod", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert len(doc["runs"]) == 10 and doc["runs"][0]["runId"] == ids[-1]
    res = _cli("--root", store.root, "--cluster", "prod")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == [
        "run",
        "group",
        "window",
        "status",
        "ai",
        "rc",
        "ad",
        "li",
        "om",
        "findings",
        "verified",
        "lag",
        "blind",
        "secs",
    ]
    failed = next(line for line in lines if line.startswith(ids[3]) and "broker-b" in line)
    assert failed.split()[3:9] == ["FAILED", "pass", "pass", "pass", "fail", "pass"]
    res = _cli("--root", store.root, "--cluster", "no/such")
    assert res.returncode == 2 and "not a valid archive path component" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_history_page_in_chromium(root, tmp_path_factory):
    store, ids = root
    url = publish_history(store, "prod")
    path = store.path + "/" + history_page_key("prod")
    assert url == f"{store.root}/{history_page_key('prod')}"
    pw, ctx = browser_context(tmp_path_factory)
    try:
        page_url = "file://" + path
        page, visit = open_page(ctx, page_url)
        assert visit.requests == [page_url]  # self-contained: nothing else is fetched
        assert not visit.failed and not visit.console_errors
        shot = screenshot(page, "history")
        assert ink(shot) > 0.01
        plots = page.evaluate(
            """() => [...document.querySelectorAll('svg.plot')].map(s => [s.dataset.plot,
                s.querySelectorAll('polyline').length, s.querySelectorAll('g.failed').length])"""
        )
        assert plots == [
            ["findings", 2, 1],
            ["bytesVerified", 2, 1],
            ["lagBytes", 2, 1],
            ["blindBytes", 2, 1],
            ["seconds", 2, 1],
        ]
        for kind in ("findings", "lagBytes"):
            chart = page.locator(f'svg[data-plot="{kind}"]')
            assert ink(screenshot(page, f"history-{kind}", chart)) > 0.01
        rows = page.locator("table.runs tbody tr")
        assert rows.count() == 10
        failed = page.locator(f'tr[data-run="{ids[3]}"][data-group="broker-b"]')
        assert "FAILED" in failed.inner_text() and "FAIL" in failed.inner_text()
        # each run links its report, relative to the page (so the page moves with the bucket)
        href = failed.locator("a").get_attribute("href")
        assert href == f"../../{ids[3]}/broker-b/report.html"
        assert "no verdict.json" in page.inner_text("#skipped")
    finally:
        ctx.close()
        pw.stop()
