"""``haproof demo`` end to end, as a user runs it: real processes, embedded S3, Airflow, Spark."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_the_main_job_and_passes(tmp_path):
    workdir = tmp_path / "demo"
    res = subprocess.run(
        [sys.executable, "-m", "broker.cli", "demo", "--workdir", str(workdir),
         "--messages", "300"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert res.stdout.rstrip().endswith("PASSED")
    for check in ("replica_consistency", "acknowledged_durability", "log_integrity",
                  "offset_monotonicity"):  # fmt: skip
        assert f"PASS  {check}" in out
    # 300 before the failover, 150 after: a SYNC_MASTER with its slave acknowledges every one.
    assert "acknowledged sends: 450" in out
    assert "is master of broker-a under epoch 2" in out
    reports = list(workdir.glob("report/*/report/index.html"))
    assert len(reports) == 1 and "haproof_ranges" in reports[0].read_text()
    assert (workdir / "report" / "dag_report.json").is_file()
