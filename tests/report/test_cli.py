"""``haproof report`` as a separate process: rebuilds report.html from a run's tables."""

from __future__ import annotations

import json
import subprocess
import sys

from contracts.object_store import open_store
from tests.report import runs
from tests.support import schemas


def haproof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_report_rebuilds_every_group_of_a_run(tmp_path):
    store = open_store(f"file://{tmp_path}")
    runs.write_archive(store)
    runs.write_run(store, "r-fail", "failing")
    res = haproof("report", "--root", f"file://{tmp_path}", "--run", "r-fail")
    assert res.returncode == 0, res.stderr
    page = tmp_path / "audits" / "r-fail" / runs.GROUP / "report.html"
    assert res.stdout.splitlines()[0] == "broker-a: FAILED"
    assert f"report: {page.as_uri()}" in res.stdout
    assert '<h1 id="verdict">FAILED</h1>' in page.read_text()
    assert res.stderr == ""  # quiet by default

    res = haproof(
        "report",
        "--root",
        f"file://{tmp_path}",
        "--run",
        "r-fail",
        "--broker-name",
        runs.GROUP,
        "--json",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    schemas.validate(doc, "report")
    (r,) = doc["reports"]
    assert (r["brokerName"], r["headline"], r["missing"]) == (runs.GROUP, "FAILED", [])
    assert r["bytes"] == page.stat().st_size


def test_unusable_input_exits_2_with_one_line(tmp_path):
    root = f"file://{tmp_path}"
    for args, says in (
        (("--run", "nothing-here"), "run 'nothing-here' has no outputs"),
        (("--run", "../etc"), "runId '../etc' is not a valid archive path component"),
        (("--run", "r1", "--broker-name", "ghost"), "run 'r1' wrote nothing for group 'ghost'"),
    ):
        res = haproof("report", "--root", root, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert res.stderr.count("\n") == 1 and says in res.stderr, res.stderr
        assert res.stderr.startswith("haproof report: ")


def test_a_verdict_nested_100k_deep_is_a_note_not_a_traceback(tmp_path):
    store = open_store(f"file://{tmp_path}")
    runs.write_archive(store)
    runs.write_run(store, "r-deep", "failing")
    verdict = tmp_path / "audits" / "r-deep" / runs.GROUP / "verdict.json"
    verdict.write_text("[" * 100_000 + "]" * 100_000)
    res = haproof("report", "--root", f"file://{tmp_path}", "--run", "r-deep", "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    (r,) = json.loads(res.stdout)["reports"]
    assert any("verdict" in m and "nested deeper" in m for m in r["missing"]), r["missing"]
