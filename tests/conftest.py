"""Shared test helpers: where the golden RocketMQ files are, polling with a deadline, a driven
clock. The async helpers (``wait_for``, ``run_node``, ``free_port``) are in tests/support/."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _find_shared() -> Path:
    env = os.environ.get("HAPROOF_SHARED")
    if env:
        return Path(env)
    for parent in REPO.parents:
        candidate = parent / "shared" / "golden"
        if candidate.is_dir():
            return candidate.parent
    return REPO.parent / "shared"


SHARED = _find_shared()
GOLDEN_STORES = SHARED / "golden" / "rocketmq-store"


@pytest.fixture(scope="session")
def golden_stores() -> Path:
    if not GOLDEN_STORES.is_dir():
        pytest.fail(f"golden RocketMQ stores not found at {GOLDEN_STORES} (set HAPROOF_SHARED)")
    return GOLDEN_STORES


def wait_until(
    cond: Callable[[], object],
    timeout_s: float = 10.0,
    what: str = "condition",
    every_s: float = 0.01,
):
    """Poll ``cond`` every ``every_s`` until it returns something truthy; fail after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(every_s)


@pytest.fixture
def driven_clock():
    """A ``DrivenClock`` (broker/clock.py): time moves only by ``await clock.advance(ms)``; hand
    it to a node or a loop service to run them by ticks with no wall time."""
    from broker.clock import DrivenClock

    return DrivenClock()


@pytest.fixture(scope="session")
def s3_server():
    """The embedded S3 API server (moto) as a real subprocess on 127.0.0.1."""
    from tools.s3server import S3Server

    server = S3Server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every test that audits (tests/spark_jobs, tests/faults)."""
    from spark_jobs.session import get_spark

    session = get_spark("haproof-tests", "local[2]", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The figures tests asked to show (tests/support/summary.py), e.g. how many simulation
    schedules this run checked."""
    from tests.support.summary import SUMMARY_LINES

    lines = config.stash.get(SUMMARY_LINES, [])
    if lines:
        terminalreporter.section("haproof figures")
        for line in lines:
            terminalreporter.write_line(line)
