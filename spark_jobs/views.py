"""A node's log as segments of archive objects, and the plans of the replica comparison: which
bytes of which node are compared against which master, in which windows."""

from __future__ import annotations

import bisect


def node_view(chunks: list[dict]) -> list[dict]:
    """Non-overlapping segments of a node's current log: later epochs win overlaps (within an
    epoch, the chunk listed first). Segments are kept sorted, so each chunk meets only the
    segments it overlaps (thousands of small chunks stay cheap)."""
    segs: list[tuple[int, int, str, int]] = []  # (start, end, key, kstart), sorted by start
    starts: list[int] = []
    for c in sorted(chunks, key=lambda c: -c["epoch"]):
        lo, hi = c["start"], c["end"]
        pieces, pos = [], lo
        j = max(0, bisect.bisect_right(starts, lo) - 1)
        while j < len(segs) and segs[j][0] < hi:
            s_start, s_end = segs[j][0], segs[j][1]
            if s_end > pos:
                if s_start > pos:
                    pieces.append((pos, s_start))
                pos = max(pos, s_end)
            j += 1
        if pos < hi:
            pieces.append((pos, hi))
        for a, b in pieces:
            k = bisect.bisect_left(starts, a)
            starts.insert(k, a)
            segs.insert(k, (a, b, c["key"], c["start"]))
    return [{"start": a, "end": b, "key": key, "kstart": ks} for a, b, key, ks in segs]


def clip(segs: list[dict], lo: int, hi: int | None) -> list[dict]:
    """The parts of ``segs`` inside [lo, hi) (``hi=None``: no upper bound)."""
    out = []
    for s in segs:
        a, b = max(s["start"], lo), s["end"] if hi is None else min(s["end"], hi)
        if a < b:
            out.append({**s, "start": a, "end": b})
    return out


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
    for node in sorted(views):
        for i, (_epoch, lo, master) in enumerate(epochs):
            if master == node or master not in views:
                continue
            hi = epochs[i + 1][1] if i + 1 < len(epochs) else None
            m = clip(views[master], lo, hi)
            s = clip(_minus_keyed(views[node], tails.get(node, [])), lo, hi)
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
    out = []
    for s in segs:
        out += _minus([s], [h for h in holes if h["key"] == s["key"]])
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
