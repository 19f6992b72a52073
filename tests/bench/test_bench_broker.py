"""``haproof bench broker`` against real namesrv and broker processes: one JSON line."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_broker_prints_one_json_line_and_reads_back_everything() -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "bench",
            "broker",
            "--producers",
            "2",
            "--seconds",
            "1",
            "--body-bytes",
            "128",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = [x for x in res.stdout.splitlines() if x.strip()]
    assert len(lines) == 1
    fig = json.loads(lines[0])
    assert fig["bench"] == "broker" and fig["failed"] == 0
    assert fig["sent"] > 10 and fig["consumed"] == fig["sent"]
    assert fig["msgs_per_s"] > 0 and fig["p99_send_ms"] >= fig["p50_send_ms"] > 0
    # two load processes, 16 sends in flight each producer; CPU cost per message of both sides
    assert (fig["processes"], fig["inflight"]) == (2, 16)
    assert fig["broker_cpu_us_per_msg"] > 0 and fig["client_cpu_us_per_msg"] > 0
    assert abs(fig["broker_msgs_per_cpu_s"] * fig["broker_cpu_us_per_msg"] / 1e6 - 1) < 0.01


def test_bench_broker_in_process_one_in_flight() -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "bench",
            "broker",
            "--producers",
            "2",
            "--seconds",
            "1",
            "--body-bytes",
            "64",
            "--processes",
            "0",
            "--inflight",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    fig = json.loads(res.stdout.strip().splitlines()[-1])
    assert fig["processes"] == 0 and fig["failed"] == 0 and fig["consumed"] == fig["sent"] > 2


def test_bench_broker_rejects_bad_arguments() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "broker", "--producers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "must be positive" in res.stderr


def test_bench_broker_with_committing_groups_compares_the_offset_log() -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "bench",
            "broker",
            "--producers",
            "2",
            "--seconds",
            "2",
            "--body-bytes",
            "128",
            "--processes",
            "0",
            "--commit-groups",
            "2",
            "--commit-queues",
            "8",
            "--offset-log",
            "both",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    fig = json.loads(res.stdout.strip().splitlines()[-1])
    for side in ("off", "on"):
        run = fig["offsetLog"][side]
        assert run["commits"] == 2 * 8 * run["commit_rounds"] > 0 and run["commits_failed"] == 0
        assert run["p99_commit_ms"] >= run["p50_commit_ms"] > 0
    assert fig["on_vs_off"] > 0


def test_offset_log_comparison_alternates_sides_and_takes_medians() -> None:
    """ABBA order (a load that changes over the runs falls on both sides), medians of msgs/s,
    the broker's CPU per message compared as capacity (off/on)."""
    from tools.bench.broker import compare_offset_log

    order: list[bool] = []
    rates = iter([100.0, 90.0, 80.0, 70.0, 60.0, 50.0])

    def one_run(on: bool) -> dict:
        order.append(on)
        rate = next(rates)
        cpu = 50.0 if on else 40.0
        return {"msgs_per_s": rate, "broker_cpu_us_per_msg": cpu, "failed": 0, "sent": 5}

    fig = compare_offset_log(lambda on: {**one_run(on), "consumed": 5}, 3)
    assert order == [False, True, True, False, False, True]
    # off: 100, 70, 60 -> 70; on: 90, 80, 50 -> 80
    assert fig["msgs_per_s_median"] == {"off": 70.0, "on": 80.0}
    assert fig["on_vs_off"] == round(80 / 70, 3) and fig["cpu_on_vs_off"] == 0.8
    assert fig["msgs_per_s"] == 80.0 and fig["sent"] == 30 and len(fig["offsetLog"]["on"]) == 3
