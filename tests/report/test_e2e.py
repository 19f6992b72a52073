"""End to end: a real RocketMQ store with one flipped body byte, shipped with ``haproof archive``,
audited with ``haproof audit --json`` (Spark local, GX), its report opened in Chromium offline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from contracts.record.reader import decode_record
from tests.report.browser import browser_context, open_page, screenshot
from tests.support import schemas

ERIC = "EricPanGopher_rocketmq_unit_test_store"
NOISE = (
    "_docs_decorators",
    "INFO great_expectations",
    "Using Spark's default log4j profile",
    "INFO py4j",
    "NativeCodeLoader",
    "Setting default log level",
)


def haproof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    pw, context = browser_context(tmp_path_factory)
    yield context
    context.close()
    pw.stop()


def test_failing_audit_report_opens_offline_with_its_witness(tmp_path, golden_stores, ctx):
    bad = tmp_path / "store"
    shutil.copytree(golden_stores / ERIC, bad)
    for p in bad.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    f = bad / "commitlog" / "00000000000000016384"
    data = bytearray(f.read_bytes())
    data[172 * 2 + data[172 * 2 :].index(b"Once, there")] ^= 0x02
    f.write_bytes(bytes(data))
    rec = decode_record(bytes(data), 172 * 2, base_offset=16384)
    root = f"file://{tmp_path}/arch"
    res = haproof(
        "archive",
        "--store-dir",
        str(bad),
        "--root",
        root,
        "--cluster",
        "rmq",
        "--broker-name",
        "broker-a",
        "--node",
        "broker-a-0",
    )
    assert res.returncode == 0, res.stderr

    res = haproof("audit", "--root", root, "--cluster", "rmq", "--run-id", "e2e", "--json")
    assert res.returncode == 1, res.stderr[-3000:]
    doc = json.loads(res.stdout)  # stdout is the verdict document and nothing else
    schemas.validate(doc, "audit")
    assert doc["runId"] == "e2e" and doc["passed"] is False
    (group,) = doc["groups"]
    url = group["report"]
    (integrity,) = [c for c in group["checks"] if c["name"] == "log_integrity"]
    first = {
        "offset": rec.physical_offset,
        "node": "broker-a-0",
        "topic": rec.topic,
        "queue": rec.queue_id,
    }
    assert integrity["status"] == "fail" and integrity["first"] == first, integrity
    # the terminal's FAIL line says where, and GX ran under the haproof run id
    fail_line = next(
        line for line in res.stderr.splitlines() if "FAIL        log_integrity" in line
    )
    assert (
        f"first at offset {rec.physical_offset} topic {rec.topic} queue {rec.queue_id}"
        f" node broker-a-0" in fail_line
    ), fail_line
    assert url == f"{root}/audits/e2e/broker-a/report.html"
    noise = [line for line in res.stderr.splitlines() if any(n in line for n in NOISE)]
    assert noise == [], noise

    page, visit = open_page(ctx, url)
    screenshot(page, "e2e-failing")
    assert visit.requests == [url] and not visit.console_errors
    assert page.inner_text("#verdict").startswith("FAILED")
    integrity = page.inner_text("#check-log_integrity")
    assert str(rec.physical_offset) in integrity and "crc" in integrity.lower()
    assert str(rec.physical_offset) in page.inner_text("#why")
    # the Data Docs of the run are linked and render from the archive too
    assert page.locator("a#data-docs").get_attribute("href") == "report/index.html"
    docs, docs_visit = open_page(ctx, f"{root}/audits/e2e/broker-a/report/index.html")
    assert all(u.startswith(f"{root}/audits/e2e/broker-a/report/") for u in docs_visit.requests)
    assert docs.locator("table tbody tr").count() >= 1
    docs_dir = tmp_path / "arch" / "audits" / "e2e" / "broker-a" / "report"
    runs_named = {p.relative_to(docs_dir).parts[2] for p in docs_dir.glob("validations/*/*/*")}
    assert runs_named == {"haproof-e2e"}, runs_named
