"""What every demo step shares: the demo's names, its state (processes, S3, what was sent and
committed), its output lines, and polling a condition with a deadline."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from contracts.errors import HaproofError
from tools.localcluster import LocalProcess
from tools.s3server import S3Server

CLUSTER = "DemoCluster"
GROUP = "broker-a"
TOPIC = "DemoTopic"
CONSUMER_GROUP = "demo-consumer"
BUCKET = "haproof-demo"
#: written first into a --workdir the demo made; only such a directory is ever deleted
MARKER = ".haproof-demo"
OFFSETS_KEY = f"{TOPIC}@{CONSUMER_GROUP}"
REPO = Path(__file__).resolve().parents[2]
MASTER, SLAVE = "broker-a-0", "broker-a-1"


class DemoError(HaproofError):
    """A demo step failed; the message says which and where its logs are."""


def covers(have: dict, want: dict[int, int]) -> bool:
    """Whether an offset table entry (queue id keys, str or int) holds at least ``want``."""
    table = {int(q): int(o) for q, o in have.items()}
    return all(table.get(q, -1) >= o for q, o in want.items())


def has_module(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def poll(cond, timeout_s: float, what: str, interval_s: float = 0.2) -> None:
    """Until ``cond()`` holds; DemoError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


def haproof(d: Demo, *argv: str, timeout_s: float) -> subprocess.CompletedProcess:
    """``haproof ARGV...`` in a child process with the demo's environment, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **d.env},
    )


class Demo:
    """One demo run's state, handed from step to step, and its output."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(args.workdir).resolve()
        self.steps = 7
        self.step_no = 0
        self.t0 = time.monotonic()
        self.procs: dict[str, LocalProcess] = {}
        self.ports: dict[str, tuple[int, int]] = {}  # node -> (listen port, HA port)
        self.s3: S3Server | None = None
        self.root = f"s3://{BUCKET}/archive"
        self.env: dict[str, str] = {}
        self.acked = 0
        self.committed: dict[int, int] = {}  # the group's offsets committed before the failover
        self.notes: list[str] = []
        # node -> (brokerId, role, epoch) at the end, for one-shot shipping
        self.roles = {MASTER: (0, "SYNC_MASTER", 1), SLAVE: (1, "SLAVE", 1)}

    def step(self, what: str) -> None:
        self.step_no += 1
        self.say(f"step {self.step_no}/{self.steps}: {what}")

    def say(self, msg: str) -> None:
        print(f"[demo {time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)

    def skip(self, what: str, why: str) -> None:
        self.notes.append(f"{what}: {why}")
        self.say(f"  skipped {what}: {why}")
