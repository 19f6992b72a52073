"""``haproof chaos`` with real processes on 127.0.0.1: a smoke run (one round: the master
killed -9 and restarted) in the default suite; a few minutes of every fault kind, and the
planted ``unclean-election`` caught, under ``pytest -m stress tests/chaos``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from tools.chaos.runner import KINDS, run, schedule

SMOKE_SEED = 2  # one round: kill -9 the master


def test_one_round_killing_the_master_keeps_every_promise(tmp_path) -> None:
    fault = schedule(SMOKE_SEED, 1, ("kill",))[0]
    assert fault.on_master
    t0 = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "chaos",
            "--rounds",
            "1",
            "--faults",
            "kill",
            "--seed",
            str(SMOKE_SEED),
            "--producers",
            "1",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    wall_s = time.monotonic() - t0
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert summary["violations"] == {} and summary["lost"] == 0
    assert summary["reads_beyond_confirm"] == 0  # a violation by default (--strict-reads)
    assert summary["acked"] > 0 and summary["reads"] > 0 and summary["offset_queries"] > 0
    assert summary["archived_events"] > 0
    masters = [op for op in history if op["op"] == "master"]
    kills = [op for op in history if op["op"] == "fault" and op["kind"] == "kill"]
    assert len(kills) == 1 and kills[0]["node"] != ""
    assert len(masters) >= 2 and masters[-1]["epoch"] > masters[0]["epoch"], masters
    assert [op["t"] for op in history] == sorted(op["t"] for op in history)
    print(f"chaos smoke: {wall_s:.1f} s, {summary['acked']} acked, {len(masters)} masters")


@pytest.mark.stress
def test_minutes_of_every_fault_kind_keep_every_promise(tmp_path) -> None:
    outcome = asyncio.run(run(tmp_path, seed=int(time.time()) % 100_000, rounds=16, kinds=KINDS))
    print(json.dumps(outcome.summary, sort_keys=True))
    assert not outcome.failed, outcome.summary
    assert outcome.summary["acked"] > 500 and outcome.summary["lost"] == 0


@pytest.mark.stress
@pytest.mark.parametrize("bug", [None, "unclean-election"])
def test_a_planted_unclean_election_is_caught(tmp_path, bug) -> None:
    """The same lagging failovers keep every promise without the bug and lose acknowledged
    messages with it (the controller elects the slave that missed them)."""
    outcome = asyncio.run(
        run(tmp_path, seed=3, rounds=2, kinds=("lagging-failover",), planted_bug=bug)
    )
    print(json.dumps(outcome.summary, sort_keys=True))
    if bug is None:
        assert not outcome.failed, outcome.summary
    else:
        assert outcome.failed and "ack-lost" in outcome.summary["violations"], outcome.summary
