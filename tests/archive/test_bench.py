from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_bench_archive_prints_one_json_line_and_rerun_is_idempotent() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "bench",
            "archive",
            "--messages",
            "500",
            "--body-bytes",
            "200",
            "--mapped-file-size",
            "65536",
            "--chunk-max-bytes",
            "40000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "archive"
    assert figures["bytes"] > 500 * 200
    assert figures["chunks"] >= figures["bytes"] // 40000
    assert figures["rerun_new_chunks"] == 0
    assert figures["crc_failures"] == 0
    assert figures["mb_per_s"] > 0


def _bench_with_broker(rounds: int, *extra: str) -> dict:
    """A short live run of ``bench archive --with-broker``; its one JSON line."""
    proc = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "archive", "--with-broker"]
        + ["--seconds", "1.5", "--producers", "4", "--archive-interval-ms", "200"]
        + ["--rounds", str(rounds), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bench_archive_with_broker_measures_both_modes_and_the_archive_drains() -> None:
    figures = _bench_with_broker(2, "--control")
    assert figures["mode"] == "with-broker" and figures["ok"] is True
    off, on = figures["off"], figures["on"]
    assert off["failed"] == 0 and on["failed"] == 0 and off["sent"] > 0 and on["sent"] > 0
    assert on["drained"] and on["storage_errors"] == []
    # everything appended while archiving was on reached the archive (plus the warm-up send)
    assert on["archived_bytes"] >= on["sent"] * 1024
    assert on["lag_p99_ms"] >= on["lag_p50_ms"] >= 0
    assert figures["throughput_ratio"] == round(on["msgs_per_s"] / off["msgs_per_s"], 3)
    assert figures["rounds"] == 2 and len(figures["ratio_per_round"]) == 2
    low, high = figures["ratio_ci95"]
    assert low <= figures["ratio_median_of_rounds"] <= high
    assert figures["ratio_vs_0_9"] in ("met", "missed", "undecided")
    # the control runs: archiving off, another process uploading the off runs' MB/s meanwhile
    control = figures["control"]
    assert control["failed"] == 0 and control["sent"] > 0 and "drained" not in control
    assert control["control_upload_mb_per_s"] > 0
    assert figures["control_ratio"] == round(control["msgs_per_s"] / off["msgs_per_s"], 3)
    assert on["archiver_cpu_ms_per_mb"] > 0 and off["archiver_cpu_ms_per_mb"] == 0
    assert set(figures["targets"]) == {
        "append_ge_20_mb_per_s",
        "lag_p99_lt_2x_interval",
        "ratio_ge_0_9",
    }


def test_bench_archive_to_a_file_root_leaves_the_s3_server_idle() -> None:
    figures = _bench_with_broker(1, "--archive-to", "file")
    assert figures["archive_to"] == "file" and figures["ok"] is True
    on = figures["on"]
    assert on["drained"] and on["archived_bytes"] >= on["sent"] * 1024
    # the archiver child did the work; the S3 server (running, idle) next to nothing
    assert on["s3_cpu_ms_per_mb"] < on["archiver_cpu_ms_per_mb"]
    refused = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "archive", "--with-broker"]
        + ["--archive-to", "file", "--control"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "--control" in refused.stderr


def test_bench_archive_with_store_paces_appends_and_the_node_archiver_drains() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "archive", "--with-store"]
        + ["--seconds", "2", "--rate-mb-s", "2", "--archive-interval-ms", "200"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["mode"] == "with-store" and figures["ok"] is True and figures["drained"]
    assert figures["sent"] > 0 and 0 < figures["append_mb_per_s"] <= 2 * 1.2
    assert figures["storage_errors"] == [] and figures["archive_mb_per_s"] > 0
    assert figures["lag_max_ms"] >= figures["lag_p99_ms"] >= figures["lag_p50_ms"]


def test_the_ratio_interval_is_a_t_interval_on_the_rounds_log_ratios() -> None:
    import math

    from scipy import stats

    from tools.bench.archive_stats import _T975, ratio_interval

    for df, t in enumerate(_T975, 1):
        assert t == pytest.approx(stats.t.ppf(0.975, df), abs=5e-4)
    rounds = [0.95, 0.86, 0.91, 0.88, 0.93]
    logs = [math.log(r) for r in rounds]
    low, high = stats.t.interval(
        0.95, len(logs) - 1, loc=sum(logs) / len(logs), scale=stats.sem(logs)
    )
    ci, verdict = ratio_interval(rounds)
    assert ci == [round(math.exp(low), 3), round(math.exp(high), 3)]
    assert ci[0] < 0.9 < ci[1] and verdict == "undecided"
    ci, verdict = ratio_interval([0.93, 0.95, 0.94, 0.96])
    assert 0.9 <= ci[0] < 0.93 and 0.96 < ci[1] < 1 and verdict == "met"
    assert ratio_interval([0.8, 0.82, 0.81])[1] == "missed"
    assert ratio_interval([0.95]) == (None, "undecided")  # one round: no spread to go by
    assert ratio_interval([0.95, 0.0]) == (None, "undecided")  # a mode that sent nothing
