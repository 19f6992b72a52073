"""``haproof bench broker`` with a slave process: replication lag figures in the JSON line."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_broker_sync_master_with_slave_reports_replication_lag() -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "bench",
            "broker",
            "--role",
            "SYNC_MASTER",
            "--flush",
            "SYNC_FLUSH",
            "--producers",
            "2",
            "--seconds",
            "1",
            "--body-bytes",
            "128",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    lines = [x for x in res.stdout.splitlines() if x.strip()]
    assert len(lines) == 1
    fig = json.loads(lines[0])
    assert fig["with_slave"] is True and fig["failed"] == 0  # a slave acked every send
    assert fig["consumed"] == fig["sent"] > 10
    # every acknowledged message (all but the warm-up) was seen covered by the slave's ack
    assert fig["replication_lag_samples"] == fig["sent"] - 1
    assert fig["replication_lag_p99_ms"] >= fig["replication_lag_p50_ms"] >= 0
    # Measured where the acks land (the master's ack history), not by polling its status.
    assert fig["lag_measured_at"] == "master ack history"
