"""``haproof archive`` then ``haproof audit`` on real RocketMQ files, as separate processes."""

from __future__ import annotations

import json
import re
import subprocess

from tests.support.haproof_cli import ERIC, flipped_store, haproof_argv
from tests.support.haproof_cli import ship as ship_store


def haproof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(haproof_argv(*args), capture_output=True, text=True, timeout=300)


def ship(store_dir, root: str) -> None:
    ship_store(store_dir, root, extra=("--chunk-max-bytes", "9000"))


def test_golden_store_audits_clean_and_a_flipped_byte_fails_there(tmp_path, golden_stores):
    clean_root = f"file://{tmp_path}/clean"
    ship(golden_stores / ERIC, clean_root)
    res = haproof("audit", "--root", clean_root, "--cluster", "rmq", "--run-id", "r1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"PASS +log_integrity", res.stdout)
    # one node: no replica to compare, no offsets committed, so the headline says so (exit 0)
    assert re.search(r"NO EVIDENCE +replica_consistency +findings 0 +one node only", res.stdout)
    assert res.stdout.rstrip().endswith("NO_EVIDENCE")
    verdict = json.loads((tmp_path / "clean" / "audits" / "r1" / "verdict.json").read_text())
    assert verdict["passed"] and verdict["recordsChecked"] == 179 + 3
    assert verdict["status"] == "NO_EVIDENCE"
    # the GX suites ran after the jobs: their report sits beside the verdict
    report = tmp_path / "clean" / "audits" / "r1" / "broker-a" / "report" / "index.html"
    assert re.search(r"PASS +expectations", res.stdout)
    assert f"report: {clean_root}/audits/r1/broker-a/report/index.html" in res.stdout
    assert report.is_file() and report.stat().st_size > 0
    gx = json.loads((report.parent.parent / "expectations.json").read_text())
    assert gx["success"] and gx["suites"]

    bad = tmp_path / "bad"
    rec = flipped_store(golden_stores, bad, record=5, bit=0x04)
    bad_root = f"file://{tmp_path}/badarchive"
    ship(bad, bad_root)
    res = haproof("audit", "--root", bad_root, "--cluster", "rmq", "--run-id", "r2")
    assert res.returncode == 1, res.stdout + res.stderr
    assert re.search(r"FAIL +log_integrity", res.stdout)
    gx = json.loads(
        (tmp_path / "badarchive" / "audits" / "r2" / "broker-a" / "expectations.json").read_text()
    )
    failed = [s["suite"] for s in gx["suites"] if not s["success"]]
    assert failed and re.search(rf"FAIL +expectations +{', '.join(failed)}", res.stdout)
    verdict = json.loads((tmp_path / "badarchive" / "audits" / "r2" / "verdict.json").read_text())
    issues = verdict["findings"]["records_issues"]
    assert [(i["offset"], i["check"]) for i in issues] == [(rec.physical_offset, "crc_mismatch")]
    assert rec.physical_offset == 16384 + 172 * 5


def test_no_expectations_skips_the_suites(tmp_path, golden_stores) -> None:
    root = f"file://{tmp_path}/arch"
    ship(golden_stores / ERIC, root)
    res = haproof(
        "audit", "--root", root, "--cluster", "rmq", "--run-id", "r3", "--no-expectations"
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "  expectations " not in res.stdout  # (the report's path may hold the test's name)
    assert not (tmp_path / "arch" / "audits" / "r3" / "broker-a" / "expectations.json").exists()


def test_unknown_cluster_is_an_input_error(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    res = haproof("audit", "--root", f"file://{tmp_path}/empty", "--cluster", "nope")
    assert res.returncode == 2
    assert "no cluster 'nope' under" in res.stderr
