"""A node's log as segments of archive objects, and the plans of the replica comparison: which
bytes of which node are compared against which master, in which windows."""

from __future__ import annotations

import bisect
import heapq


def node_view(chunks: list[dict]) -> list[dict]:
    """Non-overlapping segments of a node's current log: later epochs win overlaps (within an
    epoch, the chunk listed first), sorted by start.

    One sweep over the chunks' boundaries with a heap of the chunks covering the current
    point (O(n log n): a year of small chunks is ~450k per node, where inserting each piece
    into a sorted list cost O(n) and the view minutes)."""
    bounds = sorted({x for c in chunks for x in (c["start"], c["end"])})
    by_start: dict[int, list[int]] = {}
    for i, c in enumerate(chunks):
        if c["start"] < c["end"]:
            by_start.setdefault(c["start"], []).append(i)
    heap: list[tuple[int, int]] = []  # (-epoch, listing index) of chunks begun
    out: list[dict] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        for i in by_start.get(a, ()):
            heapq.heappush(heap, (-chunks[i]["epoch"], i))
        while heap and chunks[heap[0][1]]["end"] <= a:
            heapq.heappop(heap)  # ended before this piece
        if not heap:
            continue  # a hole: no chunk holds [a, b)
        c = chunks[heap[0][1]]
        last = out[-1] if out else None
        if last is not None and last["key"] == c["key"] and last["end"] == a:
            last["end"] = b
        else:
            out.append({"start": a, "end": b, "key": c["key"], "kstart": c["start"]})
    return out


def clip(segs: list[dict], lo: int, hi: int | None) -> list[dict]:
    """The parts of ``segs`` inside [lo, hi) (``hi=None``: no upper bound)."""
    out = []
    for s in segs:
        a, b = max(s["start"], lo), s["end"] if hi is None else min(s["end"], hi)
        if a < b:
            out.append({**s, "start": a, "end": b})
    return out


def clip_sorted(segs: list[dict], starts: list[int], lo: int, hi: int | None) -> list[dict]:
    """:func:`clip` of segments sorted by start and not overlapping (a node's view), whose
    ``starts`` are given: only the segments inside [lo, hi) are visited."""
    i = max(0, bisect.bisect_right(starts, lo) - 1)
    j = len(starts) if hi is None else bisect.bisect_left(starts, hi)
    return clip(segs[i:j], lo, hi)


def epoch_plans(
    views: dict[str, list[dict]],
    epochs: list[tuple[int, int, str]],
    tails: dict[str, list[dict]],
) -> list[tuple[str, list, list]]:
    """(pair, master segments, slave segments) per epoch range and node that was not its master.

    ``epochs`` is ``[(epoch, start offset, master node)]`` in order: epoch ``e`` covers
    [start_e, start_next); its bytes are compared against the node that was master in it.
    ``tails`` are segments taken out of comparison (an old master's unreplicated tail).
    """
    plans = []
    starts = {n: [s["start"] for s in v] for n, v in views.items()}
    for node in sorted(views):
        own = _minus_keyed(views[node], tails.get(node, []))  # still sorted, not overlapping
        own_starts = [s["start"] for s in own]
        for i, (_epoch, lo, master) in enumerate(epochs):
            if master == node or master not in views:
                continue
            hi = epochs[i + 1][1] if i + 1 < len(epochs) else None
            m = clip_sorted(views[master], starts[master], lo, hi)
            s = clip_sorted(own, own_starts, lo, hi)
            if m or s:
                plans.append((f"{master}->{node}", m, s))
    return plans


def _minus(segs: list[dict], holes: list[dict]) -> list[dict]:
    out = segs
    for h in holes:
        nxt = []
        for s in out:
            if s["end"] <= h["start"] or s["start"] >= h["end"]:
                nxt.append(s)
                continue
            if s["start"] < h["start"]:
                nxt.append({**s, "end": h["start"]})
            if s["end"] > h["end"]:
                nxt.append({**s, "start": h["end"]})
        out = nxt
    return out


def _minus_keyed(segs: list[dict], holes: list[dict]) -> list[dict]:
    """``segs`` less the holes, each hole only cutting segments read from its own object."""
    by_key: dict[str, list[dict]] = {}
    for h in holes:
        by_key.setdefault(h["key"], []).append(h)
    out = []
    for s in segs:
        mine = by_key.get(s["key"])
        out += _minus([s], mine) if mine else [s]
    return out


def split_windows(m_view: list[dict], lo: int, hi: int, window_bytes: int) -> list[tuple]:
    """[lo, hi) cut into windows of at most ``window_bytes`` that end on the master's chunk
    boundaries where they can: a window then reads whole objects (object stores that serve a
    range by reading the whole object, as the embedded test server does, pay once per chunk)."""
    cuts = sorted(
        {lo, hi, *(x for seg in m_view for x in (seg["start"], seg["end"]) if lo < x < hi)}
    )
    out: list[tuple[int, int]] = []
    ws = lo
    for a, b in zip(cuts, cuts[1:], strict=False):
        if b - ws > window_bytes and a > ws:
            out.append((ws, a))  # close the window at the last boundary that fits
            ws = a
        while b - ws > window_bytes:
            out.append((ws, ws + window_bytes))
            ws += window_bytes
    if ws < hi:
        out.append((ws, hi))
    return out


def covered(segs: list[dict], spans: list[tuple[int, int]]) -> list[bool]:
    """For sorted sub-ranges cut at every boundary of ``segs`` (sorted, non-overlapping): is
    each one inside a segment? One pass over both."""
    out, i = [], 0
    for a, b in spans:
        while i < len(segs) and segs[i]["end"] <= a:
            i += 1
        out.append(i < len(segs) and segs[i]["start"] <= a and b <= segs[i]["end"])
    return out
