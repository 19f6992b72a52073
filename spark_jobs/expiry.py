"""History before the archive's retention horizon (``haproof archive prune``) is ``expired``.

The audit reads the group's retention marker (:mod:`contracts.retention`), leaves out the
chunks, snapshots and events below it (a prune interrupted half-way may have left some), and
names what the comparison could not see there ``expired`` instead of ``missing`` or
``unverifiable``: each node's history below its ``expiredBelow`` offset was deleted on purpose.
"""

from __future__ import annotations

from contracts import audit_tables as T
from contracts.retention import Horizon

# verdicts a pruned range would otherwise get: one side (or both) has nothing there
_ABSENT = (T.MISSING, T.UNVERIFIABLE)


def apply_horizon(ga, horizon: Horizon | None) -> None:
    """Drop from ``ga`` what lies below the horizon (in place)."""
    if horizon is None:
        return
    for node, na in ga.nodes.items():
        below = horizon.expired_below.get(node, 0)
        na.chunks = [c for c in na.chunks if c["end"] > below]
        keep = [i for i, s in enumerate(na.snapshots) if s.takenAt >= horizon.before_ms]
        na.snapshots = [na.snapshots[i] for i in keep]
        na.events = [e for e in na.events if e["at"] >= horizon.before_ms]


def _detail(horizon: Horizon, h: int) -> str:
    return f"before the retention horizon (pruned before {horizon.before_ms} ms, below {h})"


def mark_expired(ranges: list[dict], horizon: Horizon | None, start_at: dict[str, int]) -> list:
    """``ranges`` with the absent parts below each pair's horizon renamed ``expired``, and, for a
    pair compared from offset 0 (a full run), one ``expired`` range for the history before."""
    if horizon is None:
        return ranges
    out: list[dict] = []
    pairs = sorted({r["pair"] for r in ranges})
    for pair in pairs:
        a, b = pair.split("->", 1)
        h = max(horizon.expired_below.get(a, 0), horizon.expired_below.get(b, 0))
        low = min(horizon.expired_below.get(a, 0), horizon.expired_below.get(b, 0))
        if start_at.get(pair, 0) < low and a != b:
            out.append(
                {
                    "pair": pair,
                    "start": start_at.get(pair, 0),
                    "end": low,
                    "verdict": "expired",
                    "detail": _detail(horizon, low),
                }
            )
        for r in (r for r in ranges if r["pair"] == pair):
            if r["verdict"] not in _ABSENT or r["start"] >= h:
                out.append(r)
                continue
            cut = min(r["end"], h)
            out.append({**r, "end": cut, "verdict": "expired", "detail": _detail(horizon, h)})
            if cut < r["end"]:
                out.append({**r, "start": cut})
    return _merge(out)


def _merge(rows: list[dict]) -> list[dict]:
    merged: list[dict] = []
    for r in rows:
        last = merged[-1] if merged else None
        if (
            last
            and r["verdict"] == "expired" == last["verdict"]
            and (last["pair"], last["end"]) == (r["pair"], r["start"])
        ):
            last["end"] = r["end"]
            last["detail"] = r["detail"]
        else:
            merged.append(r)
    return merged
