"""The audit's progress lines on stderr: ``haproof audit: [  6.1s   350MB] <what>``.

One clock per process: a command pins it at its own start (``pin``), so the seconds count from
when the operator pressed Enter (Spark's start-up included); without a pinned clock each
``run_audit`` starts it afresh (the DAG tasks and benchmarks run one audit per process or
time each run). Memory is the process's resident set, what a long audit of a large archive
holds.
"""

from __future__ import annotations

import os
import sys
import time

_CLOCK = {"t0": time.monotonic(), "pinned": False}


def pin(t0: float | None = None) -> None:
    """Count from ``t0`` (``time.monotonic()``, now by default) for the rest of the process."""
    _CLOCK.update(t0=time.monotonic() if t0 is None else t0, pinned=True)


def restart() -> None:
    """A new run starts the clock unless a command pinned it."""
    if not _CLOCK["pinned"]:
        _CLOCK["t0"] = time.monotonic()


def elapsed_s() -> float:
    return time.monotonic() - _CLOCK["t0"]


def line(msg: str, prog: str = "haproof audit") -> None:
    """One progress line on stderr, with seconds since the clock started and resident memory."""
    print(f"{prog}: [{elapsed_s():6.1f}s {rss_mb():5.0f}MB] {msg}", file=sys.stderr, flush=True)


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):  # not Linux
        return 0.0
