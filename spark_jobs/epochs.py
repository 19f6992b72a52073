"""Who was master when: epochs, the old masters' unreplicated tails after a failover, and the
overlaps inside one node's archive (``conflict``).

These rules decide which bytes are compared against which master (DESIGN.md section 4): an
epoch's bytes against the node that was master in it; an old master's tail above the new
epoch's start is ``extra``, allowed only when no snapshot of that master had acknowledged it.
"""

from __future__ import annotations

import bisect

from contracts import audit_tables as T
from spark_jobs.archive_reader import GroupArchive
from spark_jobs.views import clip


def pick_master(ga: GroupArchive) -> str | None:
    """The node that is master at the end of the window: the latest master-role snapshot,
    else the node whose chunks carry brokerId 0."""
    best = None
    for na in ga.nodes.values():
        for s in na.snapshots:
            if s.role != "SLAVE" and (best is None or s.takenAt > best[0]):
                best = (s.takenAt, na.node)
    if best:
        return best[1]
    for na in ga.nodes.values():
        if na.chunks and na.chunks[-1]["brokerId"] == 0:
            return na.node
    if ga.master_hint:  # an incremental run that listed nothing new naming one
        return ga.master_hint
    return None  # no readable manifest or snapshot names a master


def epoch_masters(ga: GroupArchive) -> list[tuple[int, int, str]]:
    """``[(epoch, start offset, master node)]``: who was master in each epoch and where the
    epoch's bytes begin. The master of an epoch comes from its non-SLAVE chunk manifests,
    snapshots and ``role_changed`` events; an epoch begins at the first byte its master archived
    under it, or at the truncation point a ``truncated`` event of that epoch names (the old
    master's cut is where the new master's log went its own way). Epochs without a known master
    or without bytes are left out; with no epochs at all the final master owns everything."""
    masters: dict[int, str] = {}
    first_byte: dict[int, int] = {}
    for na in ga.nodes.values():
        for c in na.chunks:
            if c["role"] != "SLAVE":
                masters.setdefault(c["epoch"], na.node)
    for na in ga.nodes.values():
        for snap in na.snapshots:
            if snap.role != "SLAVE":
                masters.setdefault(snap.epoch, na.node)
        for ev in na.events:
            if ev["kind"] == "role_changed" and ev.get("to") not in (None, "SLAVE"):
                masters.setdefault(int(ev["epoch"]), na.node)
    for na in ga.nodes.values():
        for c in na.chunks:
            if masters.get(c["epoch"]) == na.node:
                first_byte[c["epoch"]] = min(first_byte.get(c["epoch"], c["start"]), c["start"])
        for ev in na.events:
            if ev["kind"] == "truncated" and int(ev["epoch"]) in masters:
                e = int(ev["epoch"])
                first_byte[e] = min(first_byte.get(e, ev["to"]), ev["to"])
    out: list[tuple[int, int, str]] = []
    for e in sorted(first_byte):
        start = first_byte[e] if out else 0
        if out and start <= out[-1][1]:
            start = out[-1][1]
            if masters[e] != out[-1][2]:
                out[-1] = (e, start, masters[e])  # the earlier epoch left no bytes of its own
                continue
        out.append((e, start, masters[e]))
    if not out:
        master = pick_master(ga)
        out = [(0, 0, master)] if master else []
    return out


def old_master_tails(ga, epochs, chunks: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Per node, the bytes it wrote as master of an earlier epoch that lie in a later epoch's
    range of another master: its unreplicated tail, cut off by the failover (``extra``)."""
    tails: dict[str, list[dict]] = {}
    starts = [lo for _e, lo, _m in epochs]  # epochs are in offset order
    for node, cs in chunks.items():
        for c in cs:
            if c["role"] == "SLAVE":
                continue
            # only the epochs whose range meets the chunk's (a year has dozens of epochs and
            # hundreds of thousands of chunks)
            first = max(0, bisect.bisect_right(starts, c["start"]) - 1)
            last = bisect.bisect_left(starts, c["end"])
            for i in range(first, last):
                e, lo, m = epochs[i]
                if e <= c["epoch"] or m == node:
                    continue
                hi = epochs[i + 1][1] if i + 1 < len(epochs) else None
                for seg in clip([{**c, "kstart": c["start"]}], lo, hi):
                    seg.update(epoch=c["epoch"], new_epoch=e, new_master=m)
                    tails.setdefault(node, []).append(seg)
    return tails


def conflict_plans(chunks: dict[str, list[dict]]) -> list[tuple[str, list, list]]:
    """Chunks of one node and one epoch that overlap must hold the same bytes there: each
    overlap is compared like a replica pair ``node->node`` (see :func:`judge_conflicts`)."""
    plans = []
    for node, cs in sorted(chunks.items()):
        cs = sorted(cs, key=lambda c: c["start"])
        for i, a in enumerate(cs):
            for j in range(i + 1, len(cs)):  # (no slice: a copy per chunk is quadratic too)
                b = cs[j]
                if b["start"] >= a["end"]:
                    break  # sorted by start: no later chunk overlaps ``a`` either
                lo, hi = max(a["start"], b["start"]), min(a["end"], b["end"])
                if a["epoch"] != b["epoch"] or lo >= hi:
                    continue
                seg = [
                    {"start": lo, "end": hi, "key": c["key"], "kstart": c["start"]} for c in (a, b)
                ]
                plans.append((f"{node}->{node}", [seg[0]], [seg[1]]))
    return plans


def judge_conflicts(ranges: list[dict]) -> list[dict]:
    """Rows of the ``node->node`` overlap comparisons: equal bytes are no news and are dropped;
    different bytes are an archive ``conflict`` (DESIGN.md section 3) naming both chunks."""
    out = []
    for r in ranges:
        a, b = r["pair"].split("->", 1)
        if a != b:
            out.append(r)
        elif r["verdict"] != "match":
            out.append(
                {**r, "verdict": "conflict" if r["verdict"] == "divergent" else r["verdict"]}
            )
    return out


def tail_ranges(ga, tails: dict[str, list[dict]], start_at: dict[str, int]) -> list[dict]:
    """``extra`` rows for old masters' tails: allowed unless that master had acknowledged them."""
    rows = []
    for node, segs in tails.items():
        promised = [
            (max([s.confirmOffset, *s.slaves.values()]), s)
            for s in ga.nodes[node].snapshots
            if s.role != "SLAVE"
        ]
        for seg in sorted(segs, key=lambda t: t["start"]):
            pair = f"{seg['new_master']}->{node}"
            if seg["end"] <= start_at.get(pair, 0):
                continue
            acked = [(a, s) for a, s in promised if s.epoch == seg["epoch"] and a > seg["start"]]
            detail = (
                f"unreplicated tail of {node}, master in epoch {seg['epoch']}; "
                f"epoch {seg['new_epoch']} belongs to {seg['new_master']}"
            )
            row = {"pair": pair, "start": seg["start"], "end": seg["end"], "verdict": T.EXTRA}
            if acked:
                a, s = max(acked, key=lambda x: x[0])
                snap = ga.snapshot_name(node, s.takenAt)
                row["detail"] = f"{detail}; acknowledged up to {a} by {snap}"
                row["acked_tail"] = True
                row["ack"], row["ack_snapshot"] = a, snap
            else:
                row["detail"] = detail + "; not acknowledged (allowed)"
                row["allowed"] = True
            last = rows[-1] if rows else None
            if last and (last["pair"], last["end"], last["detail"]) == (
                row["pair"],
                row["start"],
                row["detail"],
            ):
                last["end"] = row["end"]  # chunk boundaries do not matter
            else:
                rows.append(row)
    return rows
