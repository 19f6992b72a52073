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
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from contracts import audit_tables as T
from contracts.errors import ArchiveError, CorruptRecordError, ObjectNotFoundError
from contracts.object_store import StoreSpec
from contracts.record.reader import decode_record, record_to_json
from spark_jobs.archive_reader import executor_store
from spark_jobs.delivery import MESSAGE_KIND, delivery_on
from spark_jobs.log_integrity import (
    SCAN_SCHEMA,
    chunk_rows,
    fault_row,
    message_epoch,
    scan_row,
)
from spark_jobs.session import deal, has_context, run_scan_tasks, task_partitions
from spark_jobs.views import covered, split_windows
from spark_jobs.witness import divergence_detail, first_difference, merged_detail

RANGE_SCHEMA = "pair string, start long, end long, verdict string, detail string"
DEFAULT_WINDOW_BYTES = 8 * 1024 * 1024


def record_at(store, segs: list[dict], offset: int) -> dict:
    """The record holding ``offset`` on one side (decoded from its record-aligned chunk start),
    as ``haproof store dump`` prints it, plus the object ``key``; ``error`` when it cannot be."""
    for s in segs:
        if s["start"] <= offset < s["end"]:
            try:
                chunk = store.get_range(s["key"], 0, s["end"] - s["kstart"])
            except ArchiveError as exc:
                return {"offset": offset, "key": s["key"], "error": str(exc)}
            pos = 0
            while pos < len(chunk):
                try:
                    rec = decode_record(chunk, pos, base_offset=s["kstart"])
                except CorruptRecordError as exc:
                    return {"offset": s["kstart"] + pos, "key": s["key"], "error": exc.reason}
                if rec.physical_offset <= offset < rec.end:
                    doc = record_to_json(rec)
                    doc.pop("properties", None)
                    return {"offset": rec.physical_offset, "key": s["key"], **doc}
                pos += rec.total_size
    return {"offset": offset, "error": "no record found"}


#: why a piece of a node's log could not be read: the fault kind it is reported as
_NOT_READ = (T.FAULT_LOG_MISSING, T.FAULT_SIZE_MISMATCH, T.FAULT_UNREADABLE)


def read_pieces(store, segs: list[dict], ws: int, we: int) -> list[tuple]:
    """``(start, end, bytes, key, fault)`` for each segment's part inside [ws, we): one range
    read per segment; ``bytes`` None and ``fault`` a fault kind when the object is absent,
    shorter than its manifest says, or cannot be read."""
    out = []
    for s in segs:
        a, b = max(s["start"], ws), min(s["end"], we)
        if a >= b:
            continue
        base = s.get("kstart", s["start"])
        try:
            data = store.get_range(s["key"], a - base, b - base)
        except ObjectNotFoundError:
            out.append((a, b, None, s["key"], T.FAULT_LOG_MISSING))
            continue
        except ArchiveError:
            out.append((a, b, None, s["key"], T.FAULT_UNREADABLE))
            continue
        if len(data) != b - a:
            out.append((a, b, None, s["key"], T.FAULT_SIZE_MISMATCH))
        else:
            out.append((a, b, data, s["key"], None))
    return out


def _slice(pieces: list[tuple], a: int, b: int) -> tuple[bytes | None, str | None, str | None]:
    """(bytes [a, b), key, fault) from the one piece holding them (the caller cut at every
    piece boundary)."""
    for pa, pb, data, key, fault in pieces:
        if pa <= a and b <= pb:
            if data is None or (pa, pb) == (a, b):
                return data, key, fault
            return data[a - pa : b - pa], key, fault
    return None, None, T.FAULT_UNREADABLE


def _start(seg: dict) -> int:
    return seg["start"]


def _piece_finder(pieces: list[tuple]):
    """``(a, b) -> (bytes, key, fault)`` like :func:`_slice`, for calls in ascending order (a
    moving index)."""
    pos = [0]

    def at(a: int, b: int) -> bytes | None:
        i = pos[0]
        while i < len(pieces) and pieces[i][1] <= a:
            i += 1
        pos[0] = i
        return (
            _slice(pieces[i : i + 1], a, b) if i < len(pieces) else (None, None, T.FAULT_UNREADABLE)
        )

    return at


def compare_window(
    store, pair: str, master: list, slave: list, ws: int, we: int
) -> tuple[list[tuple], list[tuple], list[tuple], tuple[float, float]]:
    """Range rows ``(pair, start, end, verdict, detail)`` for [ws, we), the master's and the
    slave's pieces (see :func:`read_pieces`) and (seconds reading, seconds comparing).

    Each side's bytes in the window are read once (one range read per segment); sub-ranges cut
    at both sides' segment boundaries are compared in memory with ``==`` (memcmp), nothing is
    decoded unless they differ."""
    # only the segments inside the window, in order: a window over thousands of small chunks
    # is then walked once (linear), not once per sub-range
    master = sorted((s for s in master if s["end"] > ws and s["start"] < we), key=_start)
    slave = sorted((s for s in slave if s["end"] > ws and s["start"] < we), key=_start)
    cuts = {ws, we}
    for s in master + slave:
        for x in (s["start"], s["end"]):
            if ws < x < we:
                cuts.add(x)
    bounds = sorted(cuts)
    t0 = time.perf_counter()
    m_pieces = read_pieces(store, master, ws, we)
    s_pieces = read_pieces(store, slave, ws, we)
    t1 = time.perf_counter()
    rows = []
    spans = list(zip(bounds, bounds[1:], strict=False))
    m_cov, s_cov = covered(master, spans), covered(slave, spans)
    m_at, s_at = _piece_finder(m_pieces), _piece_finder(s_pieces)
    for (a, b), m_has, s_has in zip(spans, m_cov, s_cov, strict=True):
        if m_has and s_has:
            (mb, mkey, mfault), (sb, skey, sfault) = m_at(a, b), s_at(a, b)
            if mb is None or sb is None:
                # the archive lacks bytes a manifest promised: missing; unreadable: undecided
                faults = [f for f in (mfault, sfault) if f]
                verdict = T.MISSING if T.FAULT_UNREADABLE not in faults else T.UNVERIFIABLE
                keys = "; ".join(f"{k}: {f}" for k, f in ((mkey, mfault), (skey, sfault)) if f)
                rows.append((pair, a, b, verdict, f"not read: {keys}"))
            elif mb == sb:
                rows.append((pair, a, b, "match", ""))
            else:
                i = first_difference(mb, sb)
                if i:
                    rows.append((pair, a, a + i, "match", ""))
                detail = divergence_detail(
                    a, mb, sb, i, record_at(store, master, a + i), record_at(store, slave, a + i)
                )
                rows.append((pair, a + i, b, "divergent", json.dumps(detail, sort_keys=True)))
        elif m_has:
            rows.append((pair, a, b, "master_only", ""))
        elif s_has:
            rows.append((pair, a, b, "slave_only", ""))
        else:
            rows.append((pair, a, b, "neither", ""))
    timing = (t1 - t0, time.perf_counter() - t1)
    return rows, m_pieces, s_pieces, timing


WINDOW_COLUMNS = "pair string, start long, end long, check_node string, check_key string, "
WINDOW_COLUMNS += "file_size long, check_sha256 string, "
WINDOW_COLUMNS += "s_check_node string, s_check_key string, s_file_size long, s_check_sha256 string"
WINDOW_COLUMNS += ", msg_epoch long"  # the master chunk's epoch: its messages for ``delivery``


def _compare_partition(spec: StoreSpec, pairs: dict):
    def run(windows: Iterator[tuple]) -> Iterator[tuple]:
        store = executor_store(spec)
        for (
            pair,
            start,
            end,
            check_node,
            check_key,
            file_size,
            check_sha256,
            s_node,
            s_key,
            s_file_size,
            s_sha256,
            msg_epoch,
        ) in windows:
            master, slave = pairs[pair]
            ranges, m_pieces, s_pieces, (read_s, compare_s) = compare_window(
                store, pair, master, slave, start, end
            )
            for p, a, b, v, d in ranges:
                yield scan_row(kind="range", pair=p, start=a, end=b, verdict=v, detail=d)
            yield scan_row(kind="window", read_s=read_s, compare_s=compare_s)
            for a, b, data, key, fault in m_pieces + s_pieces:
                if data is None:
                    yield fault_row("", key, fault, a, b, f"bytes [{a}, {b}) not read ({fault})")
            if check_key is not None and m_pieces and m_pieces[0][2] is not None:
                # the window is exactly one master chunk: check its sha256 and records on the
                # bytes just read (each byte is read once)
                data, size = m_pieces[0][2], int(file_size)
                yield from chunk_rows(
                    check_node, check_key, start, data, size, check_sha256, msg_epoch
                )
            if s_key is not None and s_pieces and s_pieces[0][2] is not None:
                # ... and exactly one slave chunk too (the usual case when both nodes ship
                # chunks of the same size): the slave's own records, on its own bytes
                yield from chunk_rows(
                    s_node, s_key, start, s_pieces[0][2], int(s_file_size), s_sha256
                )

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
            last["end"] = r["end"]  # keep the first differing offset's witness
            last["detail"] = merged_detail(last["detail"], r["detail"])
        else:
            merged.append(dict(r))
    for r in merged:
        if r["verdict"] == "lag" and r["end"] - r["start"] > max_lag_bytes:
            r["detail"] += f"; lag {r['end'] - r['start']} bytes exceeds {max_lag_bytes}"
            r["lag_exceeded"] = True
    return merged


def _spans(chunks: list[dict]) -> dict[str, dict[tuple[int, int], dict]]:
    """Per node, its chunks by (start, end) (the last listed of a span)."""
    out: dict[str, dict[tuple[int, int], dict]] = {}
    for c in chunks:
        out.setdefault(c["node"], {})[(c["start"], c["end"])] = c
    return out


def _checkable(
    m_view: list[dict], windows: list[tuple], spans: dict, master: str, taken: set
) -> dict[tuple[int, int], dict]:
    """Windows that are exactly one of the chunks of ``master`` (``spans``: :func:`_spans`),
    read whole from that chunk's object: the comparison task checks that chunk's records too
    (each chunk once)."""
    by_span = spans.get(master, {})
    whole = {(s["start"], s["end"]): s["key"] for s in m_view if s["kstart"] == s["start"]}
    out = {}
    for _key, a, b in windows:
        c = by_span.get((a, b))
        if c is None or c["key"] in taken:
            continue
        if whole.get((a, b)) == c["key"]:
            taken.add(c["key"])
            out[(a, b)] = c
    return out


@dataclass
class ScanResult:
    ranges: list[dict]  # classified range verdicts, sorted by (pair, start)
    check_rows: list[dict]  # log integrity rows of the master chunks checked in the same tasks
    checked_keys: set[str]  # those chunks' keys
    read_s: float = 0.0  # wall seconds the tasks spent reading bytes, summed over windows
    compare_s: float = 0.0  # wall seconds comparing them, summed over windows
    messages: list = field(default_factory=list)  # the checked master chunks' message rows


def _window(k: str, a: int, b: int, c: dict | None, d: dict | None, keeping: bool) -> tuple:
    """A window's ``WINDOW_COLUMNS``: ``c``/``d`` the master's/slave's chunk it checks."""
    return (
        k,
        a,
        b,
        c and c["node"],
        c and c["key"],
        c and c["mappedFileSize"],
        c and c.get("sha256"),
        d and d["node"],
        d and d["key"],
        d and d["mappedFileSize"],
        d and d.get("sha256"),
        message_epoch(c) if c and keeping else None,
    )


def run_replica_consistency(
    spark,
    spec: StoreSpec,
    plans: list[tuple[str, list, list]],
    max_lag_bytes: int,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
    start_at: dict[str, int] | None = None,
    check_chunks: list[dict] | None = None,
) -> ScanResult:
    """Compare each plan's (master segments, slave segments) over the union of both, from
    ``start_at[pair]`` on (an incremental run's verified watermark) when given.

    A window that is exactly one of ``check_chunks`` of the pair's master (or of its slave) also
    gets that chunk's sha256 and record checks (log integrity) in the same task, over the bytes
    read for the comparison: each chunk is checked once, on its own node's bytes."""
    pairs, windows, ends = {}, [], {}
    keeping = (
        has_context(spark) and delivery_on()
    )  # the master chunks' message arrays come back for ``delivery``
    slave_ends: dict[str, int] = {}
    taken: set[str] = set()
    spans = _spans(check_chunks or [])
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
        mine = [(key, a, b) for a, b in split_windows(m_view, lo, hi, window_bytes)]
        master, slave = pair.split("->", 1)
        checks = {} if master == slave else _checkable(m_view, mine, spans, master, taken)
        s_checks = {} if master == slave else _checkable(s_view, mine, spans, slave, taken)
        for k, a, b in mine:
            windows.append(_window(k, a, b, checks.get((a, b)), s_checks.get((a, b)), keeping))
    if not windows:
        return ScanResult([], [], set())
    n = task_partitions(spark, len(windows))
    by_size = sorted(windows, key=lambda w: w[1] - w[2])  # largest first, dealt round-robin
    fn = _compare_partition(spec, pairs)
    rows = deal(by_size, n)
    out, kept = run_scan_tasks(spark, rows, WINDOW_COLUMNS, n, fn, SCAN_SCHEMA, MESSAGE_KIND)
    rows = [
        (r["pair"], r["start"], r["end"], r["verdict"], r["detail"])
        for r in out
        if r["kind"] == "range"
    ]
    ranges = []
    for key, (m_end, s_end) in ends.items():
        mine = [(key.split(":", 1)[1], *r[1:]) for r in rows if r[0] == key]
        ranges += classify(mine, m_end, s_end, max_lag_bytes)
    check_rows = [r for r in out if r["kind"] in ("issue", "queue", "count", "fault", "commit")]
    win = [r for r in out if r["kind"] == "window"]
    return ScanResult(
        sorted(ranges, key=lambda r: (r["pair"], r["start"])),
        check_rows,
        {r["key"] for r in check_rows if r["kind"] == "count"},
        sum(r["read_s"] for r in win),
        sum(r["compare_s"] for r in win),
        kept if kept is not None else [],
    )
