"""Check 1, replica consistency: every byte range of (master, slave) gets a verdict.

read: Spark tasks over fixed byte windows; each executor range-reads both nodes' bytes for its
window (chunk boundaries of the two nodes differ and do not matter);
transform: per sub-range ``both`` (compared: match / divergent with the first differing offset
and the records there), ``master_only``, ``slave_only`` or ``neither``; the driver then names
``lag`` (master-only at the slave's tail, up to ``max_lag_bytes``), ``missing`` (a hole inside a
node's archived log), ``extra`` (slave bytes beyond the master's log) and ``unverifiable``.
A range is ``match`` only when its bytes were read on both sides and are equal.

A node's log is the union of its chunks; where chunks of two epochs cover the same offsets (a
truncation and re-replication), the later epoch is the node's current content.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd

from broker.archive.object_store import StoreSpec
from broker.errors import CorruptRecordError
from broker.store import message as msgfmt
from spark_jobs.archive_reader import executor_store, read_log_range
from spark_jobs.session import default_parallelism, rows_frame

RANGE_SCHEMA = "pair string, start long, end long, verdict string, detail string"
DEFAULT_WINDOW_BYTES = 8 * 1024 * 1024


def node_view(chunks: list[dict]) -> list[dict]:
    """Non-overlapping segments of a node's current log: later epochs win overlaps."""
    segments: list[dict] = []
    for c in sorted(chunks, key=lambda c: -c["epoch"]):
        pieces = [(c["start"], c["end"])]
        for s in segments:
            nxt = []
            for a, b in pieces:
                if b <= s["start"] or a >= s["end"]:
                    nxt.append((a, b))
                    continue
                if a < s["start"]:
                    nxt.append((a, s["start"]))
                if b > s["end"]:
                    nxt.append((s["end"], b))
            pieces = nxt
        for a, b in pieces:
            segments.append({"start": a, "end": b, "key": c["key"], "kstart": c["start"]})
    return sorted(segments, key=lambda s: s["start"])


def _covered(segs: list[dict], a: int, b: int) -> bool:
    pos = a
    for s in segs:
        if s["end"] <= pos or s["start"] >= b:
            continue
        if s["start"] > pos:
            return False
        pos = s["end"]
        if pos >= b:
            return True
    return pos >= b


def record_at(store, segs: list[dict], offset: int) -> dict:
    """The record holding ``offset`` on one side (decoded from its record-aligned chunk start)."""
    for s in segs:
        if s["start"] <= offset < s["end"]:
            chunk = store.get_range(s["key"], 0, s["end"] - s["kstart"])
            pos = 0
            while pos < len(chunk):
                try:
                    rec = msgfmt.decode_record(chunk, pos, base_offset=s["kstart"])
                except CorruptRecordError as exc:
                    return {"offset": s["kstart"] + pos, "error": exc.reason}
                if rec.physical_offset <= offset < rec.end:
                    if rec.is_blank:
                        return {"offset": rec.physical_offset, "blank": True}
                    return {
                        "offset": rec.physical_offset,
                        "size": rec.total_size,
                        "topic": rec.topic,
                        "queueId": rec.queue_id,
                        "queueOffset": rec.queue_offset,
                        "msgId": rec.msg_id,
                        "crcOk": rec.crc_ok,
                    }
                pos += rec.total_size
    return {"offset": offset, "error": "no record found"}


def compare_window(store, pair: str, master: list, slave: list, ws: int, we: int) -> list[tuple]:
    cuts = {ws, we}
    for s in master + slave:
        for x in (s["start"], s["end"]):
            if ws < x < we:
                cuts.add(x)
    bounds = sorted(cuts)
    rows = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        m_has, s_has = _covered(master, a, b), _covered(slave, a, b)
        if m_has and s_has:
            mb, sb = read_log_range(store, master, a, b), read_log_range(store, slave, a, b)
            if mb is None or sb is None:
                rows.append((pair, a, b, "unverifiable", "a chunk could not be read"))
            elif mb == sb:
                rows.append((pair, a, b, "match", ""))
            else:
                i = next(k for k in range(len(mb)) if mb[k] != sb[k])
                if i:
                    rows.append((pair, a, a + i, "match", ""))
                detail = {
                    "firstDifferingOffset": a + i,
                    "master": record_at(store, master, a + i),
                    "slave": record_at(store, slave, a + i),
                }
                rows.append((pair, a + i, b, "divergent", json.dumps(detail, sort_keys=True)))
        elif m_has:
            rows.append((pair, a, b, "master_only", ""))
        elif s_has:
            rows.append((pair, a, b, "slave_only", ""))
        else:
            rows.append((pair, a, b, "neither", ""))
    return rows


def _compare_partition(spec: StoreSpec, pairs: dict):
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        store = executor_store(spec)
        for pdf in batches:
            rows = []
            for w in pdf.itertuples(index=False):
                master, slave = pairs[w.pair]
                rows.extend(compare_window(store, w.pair, master, slave, w.start, w.end))
            yield pd.DataFrame(rows, columns=["pair", "start", "end", "verdict", "detail"])

    return run


def classify(rows: list[tuple], m_end: int, s_end: int, max_lag_bytes: int) -> list[dict]:
    """Name the uncompared sub-ranges and merge neighbours with the same verdict."""
    named = []
    for pair, a, b, v, detail in sorted(rows, key=lambda r: (r[0], r[1])):
        if v == "master_only":
            if a >= s_end:
                v, detail = "lag", f"slave's archive ends at {s_end}"
            else:
                v, detail = "missing", "the slave's archive has a hole here"
        elif v == "slave_only":
            if a >= m_end:
                v, detail = "extra", f"beyond the master's log end {m_end}"
            else:
                v, detail = "missing", "the master's archive has a hole here"
        elif v == "neither":
            v, detail = "unverifiable", "neither node's archive holds this range"
        named.append({"pair": pair, "start": a, "end": b, "verdict": v, "detail": detail})
    merged: list[dict] = []
    for r in named:
        last = merged[-1] if merged else None
        if (
            last
            and last["pair"] == r["pair"]
            and last["verdict"] == r["verdict"]
            and last["end"] == r["start"]
            and r["verdict"] != "divergent"
        ):
            last["end"] = r["end"]
        elif last and last["verdict"] == "divergent" == r["verdict"] and last["end"] == r["start"]:
            last["end"] = r["end"]  # keep the first differing offset's detail
        else:
            merged.append(dict(r))
    for r in merged:
        if r["verdict"] == "lag" and r["end"] - r["start"] > max_lag_bytes:
            r["detail"] += f"; lag {r['end'] - r['start']} bytes exceeds {max_lag_bytes}"
            r["lag_exceeded"] = True
    return merged


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


def run_replica_consistency(
    spark,
    spec: StoreSpec,
    plans: list[tuple[str, list, list]],
    max_lag_bytes: int,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
    start_at: dict[str, int] | None = None,
) -> list[dict]:
    """Compare each plan's (master segments, slave segments) over the union of both, from
    ``start_at[pair]`` on (an incremental run's verified watermark) when given."""
    pairs, windows, ends = {}, [], {}
    slave_ends: dict[str, int] = {}
    for pair, _m, s_view in plans:
        slave = pair.split("->", 1)[1]
        slave_ends[slave] = max([slave_ends.get(slave, 0), *(s["end"] for s in s_view)])
    for i, (pair, m_view, s_view) in enumerate(plans):
        key = f"{i}:{pair}"
        pairs[key] = (m_view, s_view)
        views = m_view + s_view
        if not views:
            continue
        lo = max(min(s["start"] for s in views), (start_at or {}).get(pair, 0))
        hi = max(s["end"] for s in views)
        if lo >= hi:
            continue
        # the slave's tail is where its whole log ends, not where this epoch's part of it ends
        ends[key] = (max((s["end"] for s in m_view), default=0), slave_ends[pair.split("->")[1]])
        windows += [(key, a, b) for a, b in split_windows(m_view, lo, hi, window_bytes)]
    if not windows:
        return []
    n = max(1, min(len(windows), default_parallelism(spark) * 4))
    df = rows_frame(spark, windows, "pair string, start long, end long", n)
    rows = [
        tuple(r) for r in df.mapInPandas(_compare_partition(spec, pairs), RANGE_SCHEMA).collect()
    ]
    out = []
    for key, (m_end, s_end) in ends.items():
        mine = [(key.split(":", 1)[1], *r[1:]) for r in rows if r[0] == key]
        out += classify(mine, m_end, s_end, max_lag_bytes)
    return sorted(out, key=lambda r: (r["pair"], r["start"]))
