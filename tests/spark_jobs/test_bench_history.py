"""``haproof bench history``: a small run prints one JSON line whose figures hold together."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(900)


def test_bench_history_small_run(tmp_path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "broker.cli",
        "bench",
        "history",
        "--days",
        "2",
        "--checkpoints",
        "1,2",
        "--chunk-interval-s",
        "1800",
        "--snapshot-interval-s",
        "1800",
        "--failover-every-days",
        "1",
        "--root",
        f"file://{tmp_path}/archive",
    ]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=800)
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    lines = res.stdout.decode().strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert out["chunks_per_day"] == 48 and set(out["at"]) == {"1", "2"}
    day1, day2 = out["at"]["1"], out["at"]["2"]
    assert day2["objects"] > day1["objects"] > 0
    # a no-op run reads the state, the retention marker and one chunk manifest per node
    assert day1["noop"]["requests"]["get"] == day2["noop"]["requests"]["get"] == 2 + 3
    # a day's run reads that day's manifests and snapshots (3 nodes x 48 of each), no more
    assert 3 * 48 * 2 <= day2["day"]["requests"]["get"] <= 3 * 48 * 2 + 20
    assert 0 < out["state_bytes"] < 1_000_000
    for run in ("full", "day", "noop"):  # each audit in its own process: its own peaks
        r = day2[run]
        assert r["py_peak_mb"] >= r["py_start_mb"] > 0 and r["jvm_peak_mb"] >= r["jvm_start_mb"] > 0
    assert out["noop_ratio"] > 0 and out["day_ratio"] > 0


def test_bench_history_s3_mirror_times_the_nightly_runs_on_both_stores(tmp_path) -> None:
    """``--s3-mirror``: the S3 server preloaded from the file:// archive at each checkpoint,
    the day written to both; the S3 runs passed (a failed audit makes the bench fail) and read
    what the file:// runs read."""
    cmd = [
        sys.executable,
        "-m",
        "broker.cli",
        "bench",
        "history",
        "--days",
        "2",
        "--checkpoints",
        "1,2",
        "--chunk-interval-s",
        "1800",
        "--snapshot-interval-s",
        "1800",
        "--failover-every-days",
        "1",
        "--s3-mirror",
        "--root",
        f"file://{tmp_path}/archive",
    ]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=800)
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    out = json.loads(res.stdout.decode().strip())
    assert out["s3_mirror"] is True and set(out["at"]) == {"1", "2"}
    for d, at in out["at"].items():
        s3 = at["s3"]
        # the preload held everything written before day D, and the full audit's output
        assert at["objects"] > s3["written_before"] > 0
        assert s3["preloaded_objects"] > s3["written_before"]
        assert s3["preload_s"] >= 0 and s3["objects_per_s"] > 0 and s3["server_rss_mb"] > 0
        for run in ("day", "noop"):  # the same requests on both stores
            assert s3[run]["requests"].get("get") == at[run]["requests"].get("get"), (d, run)
        assert s3["noop"]["requests"]["get"] == 2 + 3
        assert 3 * 48 * 2 <= s3["day"]["requests"]["get"] <= 3 * 48 * 2 + 20
        assert 0 < s3["state_bytes"] < 1_000_000
    assert out["s3_noop_ratio"] > 0 and out["s3_day_ratio"] > 0 and out["noop_ratio"] > 0
    assert out["s3_state_bytes"] == out["at"]["2"]["s3"]["state_bytes"]


def test_bench_history_s3_mirror_refuses_an_s3_root() -> None:
    cmd = [sys.executable, "-m", "broker.cli", "bench", "history", "--s3-mirror", "--s3"]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=120)
    assert res.returncode == 2 and b"--s3-mirror" in res.stderr
