"""The replica comparison's plans at a year's scale: the O(n log n) node view, the plans cut by
bisection and the old masters' tails found per chunk's own epochs give exactly what the
straightforward versions (kept here as the reference) give, on any chunks and epochs."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.epochs import old_master_tails
from spark_jobs.views import _minus, clip, epoch_plans, node_view


def reference_node_view(chunks: list[dict]) -> list[dict]:
    """Later epochs win, within an epoch the chunk listed first (inserting into a sorted list)."""
    segs: list[tuple[int, int, str, int]] = []
    starts: list[int] = []
    for c in sorted(chunks, key=lambda c: -c["epoch"]):
        lo, hi = c["start"], c["end"]
        pieces, pos = [], lo
        j = max(0, bisect.bisect_right(starts, lo) - 1)
        while j < len(segs) and segs[j][0] < hi:
            if segs[j][1] > pos:
                if segs[j][0] > pos:
                    pieces.append((pos, segs[j][0]))
                pos = max(pos, segs[j][1])
            j += 1
        if pos < hi:
            pieces.append((pos, hi))
        for a, b in pieces:
            k = bisect.bisect_left(starts, a)
            starts.insert(k, a)
            segs.insert(k, (a, b, c["key"], c["start"]))
    return [{"start": a, "end": b, "key": key, "kstart": ks} for a, b, key, ks in segs]


def reference_plans(views, epochs, tails):
    plans = []
    for node in sorted(views):
        for i, (_epoch, lo, master) in enumerate(epochs):
            if master == node or master not in views:
                continue
            hi = epochs[i + 1][1] if i + 1 < len(epochs) else None
            m = clip(views[master], lo, hi)
            own = []
            for s in views[node]:
                own += _minus([s], [h for h in tails.get(node, []) if h["key"] == s["key"]])
            s = clip(own, lo, hi)
            if m or s:
                plans.append((f"{master}->{node}", m, s))
    return plans


def reference_tails(epochs, chunks):
    tails: dict[str, list[dict]] = {}
    for node, cs in chunks.items():
        for c in cs:
            if c["role"] == "SLAVE":
                continue
            for i, (e, lo, m) in enumerate(epochs):
                if e <= c["epoch"] or m == node:
                    continue
                hi = epochs[i + 1][1] if i + 1 < len(epochs) else None
                for seg in clip([{**c, "kstart": c["start"]}], lo, hi):
                    seg.update(epoch=c["epoch"], new_epoch=e, new_master=m)
                    tails.setdefault(node, []).append(seg)
    return tails


NODES = ["a", "b", "c"]


@st.composite
def archives(draw):
    chunks: dict[str, list[dict]] = {}
    for node in NODES:
        cs = []
        for k in range(draw(st.integers(0, 12))):
            start = draw(st.integers(0, 60))
            end = start + draw(st.integers(0, 25))
            epoch = draw(st.integers(0, 4))
            role = draw(st.sampled_from(["SYNC_MASTER", "SLAVE"]))
            cs.append(
                {
                    "start": start,
                    "end": end,
                    "epoch": epoch,
                    "role": role,
                    "node": node,
                    "key": f"{node}/{start:04d}-{end:04d}-e{epoch}-{k}",
                }
            )
        chunks[node] = cs
    starts = sorted(draw(st.lists(st.integers(0, 80), min_size=1, max_size=5)))
    epochs = [(e, lo, draw(st.sampled_from(NODES))) for e, lo in enumerate(starts)]
    return chunks, epochs


@settings(max_examples=300, deadline=None)
@given(archives())
def test_views_plans_and_tails_equal_the_reference(archive) -> None:
    chunks, epochs = archive
    views = {n: node_view(cs) for n, cs in chunks.items()}
    assert views == {n: reference_node_view(cs) for n, cs in chunks.items()}
    tails = old_master_tails(None, epochs, chunks)
    assert tails == reference_tails(epochs, chunks)
    assert epoch_plans(views, epochs, tails) == reference_plans(views, epochs, tails)
