"""Tests wait by polling a condition through one helper (``tests/support/waiting.py``'s async
``wait_for``, ``wait_until`` in tests/conftest.py for sync code) or by driving a clock; never by
an inline ``time.time() + ...`` deadline loop or a ``time.sleep`` (issue #24). The allow-list
names the few that remain and why; a new one fails here."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
TIME_READS = ("time.time()", "time.monotonic()", "time.perf_counter()", "loop.time()")
SLEEPS = {"time.sleep", "asyncio.sleep"}

# (path under tests/, what) -> how many may remain, and why
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("conftest.py", "deadline loop"): (1, "wait_until itself, the sync twin of wait_for"),
    ("support/waiting.py", "deadline loop"): (1, "wait_for itself"),
    ("support/faultproxy.py", "deadline loop"): (1, "the proxy's own pacing of a byte stream"),
    ("spark_jobs/standalone_driver.py", "deadline loop"): (1, "a driver script, not a test"),
    ("dags/airflow_stack.py", "deadline loop"): (1, "waits for an Airflow process to answer"),
    ("dags/alert_servers.py", "deadline loop"): (1, "a fake alert receiver's own loop"),
    # not yet moved (files other helpers were editing in the same session): move them next
    ("controller/test_archiver.py", "deadline loop"): (1, "to move to wait_for"),
    ("controller/test_process.py", "deadline loop"): (2, "to move to wait_for"),
    ("node/conftest.py", "deadline loop"): (1, "to move to wait_for"),
    ("node/test_schedule.py", "deadline loop"): (1, "to move to wait_for"),
    ("node/test_sendback.py", "deadline loop"): (2, "to move to wait_for"),
}


def _reads_time(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return any(r in text for r in TIME_READS) or "deadline" in text


def _sleeps(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and ast.unparse(n.func) in SLEEPS
        for n in ast.walk(node)
        if not (isinstance(n, ast.Call) and n.args and ast.unparse(n.args[0]) == "0")
    )


def inline_deadline_loops(source: str) -> list[int]:
    """Lines of ``while`` loops that read a clock (or a deadline) and sleep between polls."""
    return [
        n.lineno
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.While) and _reads_time(n) and _sleeps(n)
    ]


def test_the_scan_sees_a_deadline_loop() -> None:
    src = (
        "deadline = time.time() + 5\n"
        "while time.time() < deadline:\n"
        "    if ok():\n"
        "        break\n"
        "    time.sleep(0.1)\n"
        "while True:\n"
        "    await asyncio.sleep(0)\n"
    )
    assert inline_deadline_loops(src) == [2]


def test_no_new_inline_deadline_loops_in_tests() -> None:
    found: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], list[str]] = {}
    for p in sorted(TESTS.rglob("*.py")):
        rel = p.relative_to(TESTS).as_posix()
        for line in inline_deadline_loops(p.read_text()):
            key = (rel, "deadline loop")
            found[key] += 1
            where.setdefault(key, []).append(f"{rel}:{line}")
    bad = [
        loc for key, n in found.items() if n > ALLOWED.get(key, (0, ""))[0] for loc in where[key]
    ]
    assert not bad, (
        "poll with tests/support/waiting.py's wait_for (or wait_until in tests/conftest.py), "
        "or drive a clock, instead of an inline deadline loop:\n  " + "\n  ".join(bad)
    )
