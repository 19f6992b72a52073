"""A process's memory figures from Linux ``/proc`` (the benchmarks' and the embedded servers')."""

from __future__ import annotations


def status_mb(pid: int | None, field: str) -> float | None:
    """``VmRSS`` / ``VmHWM`` (its peak) of ``pid`` in MiB; None when unknown (no such process,
    not Linux)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None
