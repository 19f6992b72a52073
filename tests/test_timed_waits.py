"""Timed waits in broker/ (issue #24): a part of a node that waits for a while waits on its
injected Clock (``sleep_ms``, ``sleep_unless_set``, ``wait_event_ms``), so a DrivenClock moves
it by ticks. Reading time and sleeping are checked in tests/test_architecture.py; this checks the
other ways to wait for a while: ``asyncio.timeout``/``wait_for``, event-loop timers, and a thread
``Event``/``Condition`` ``wait(timeout)``. The allow-list keeps the honest exceptions: timeouts
on network I/O (they bound a wait on a real peer, on the event loop's own timer: a driven clock
drives no socket), and bounds on stopping (wall-time limits for joining work at shutdown)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIMERS = {"asyncio.timeout", "asyncio.timeout_at", "asyncio.wait_for"}

_NET = "a network I/O timeout on the event loop's timer"
ALLOWED: dict[str, tuple[int, str]] = {
    "broker/clock.py": (3, "the clock itself"),
    "broker/ha/client.py": (2, _NET + " (connect, handshake to the master)"),
    "broker/ha/admission.py": (1, _NET + " (a slave's handshake)"),
    "broker/remoting/client.py": (1, _NET + " (a request's answer)"),
    "broker/remoting/connection.py": (3, _NET + " (a request's answer, the close flush)"),
    "broker/remoting/server.py": (1, _NET + " (reading a frame)"),
    "broker/loop_service.py": (1, "a bound on stopping a loop (joining its task)"),
    "broker/controller/node.py": (1, "a bound on the last archive ship at stop"),
    "broker/controller/raft.py": (
        1,
        "a commit through the controller's Raft engine (pysyncobj, its own thread on wall time)",
    ),
    "broker/archive/offsets_watch.py": (1, "the haproof archive --follow CLI, not a node part"),
}


def timed_waits(source: str) -> list[tuple[int, str]]:
    found = []
    for n in ast.walk(ast.parse(source)):
        if not isinstance(n, ast.Call):
            continue
        name = ast.unparse(n.func)
        if name in TIMERS or name.endswith((".call_later", ".call_at")):
            found.append((n.lineno, name))
        elif name == "asyncio.wait" and any(k.arg == "timeout" for k in n.keywords):
            found.append((n.lineno, name))
        elif (
            isinstance(n.func, ast.Attribute)
            and n.func.attr == "wait"
            and name != "asyncio.wait"
            and (len(n.args) == 1 or any(k.arg == "timeout" for k in n.keywords))
        ):  # a thread Event/Condition wait with a timeout
            found.append((n.lineno, name))
    return sorted(found)


def test_the_scan_sees_each_form() -> None:
    src = (
        "async with asyncio.timeout(1): pass\n"
        "loop.call_later(1, f)\n"
        "event.wait(0.5)\n"
        "event.wait()\n"
        "await asyncio.wait(tasks, return_when=FIRST_COMPLETED)\n"
        "await long_poll.wait(key, grown, ms)\n"
    )
    assert [line for line, _ in timed_waits(src.replace("async with", "with"))] == [1, 2, 3]


def test_timed_waits_in_broker_go_through_the_clock() -> None:
    counts: Counter[str] = Counter()
    where: dict[str, list[str]] = {}
    for p in sorted((REPO / "broker").rglob("*.py")):
        rel = p.relative_to(REPO).as_posix()
        for line, name in timed_waits(p.read_text()):
            counts[rel] += 1
            where.setdefault(rel, []).append(f"{rel}:{line}: {name}")
    bad = [x for rel, n in counts.items() if n > ALLOWED.get(rel, (0, ""))[0] for x in where[rel]]
    assert not bad, "wait on the injected Clock (broker/clock.py):\n" + "\n".join(bad)
