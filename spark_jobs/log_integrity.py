"""Check 3, log integrity, per node: records chain, magic codes, body CRCs, BLANK only at file
ends, records inside one file, and queue offsets contiguous per (topic, queueId).

read: a master chunk that a replica comparison window covers exactly is checked inside that
window's task, on the bytes it read for the comparison (see ``replica_consistency``); every other
chunk to check gets a task of its own here (executors range-read the chunk);
transform: per-chunk issues + per-queue first/last queue offsets + a record count (small rows,
never a row per record), then queue offset continuity across the chunks of a chain is judged on
the driver (:func:`judge`); write: the ``records_issues`` rows.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

try:
    import numpy as _np
except ImportError:  # the record walk below does the same work, slower
    _np = None

from broker.archive.object_store import StoreSpec
from broker.errors import CorruptRecordError
from broker.store import message as msgfmt
from spark_jobs import fastscan
from spark_jobs.archive_reader import executor_store
from spark_jobs.session import deal, run_tasks, task_partitions


def assign_chains(chunks: list[dict]) -> list[dict]:
    """Copies of ``chunks`` with ``chain``: chunks of one node that follow each other (a chunk's
    predecessor ends where it starts, in its epoch or the latest earlier one). A chunk after a
    truncation point (no predecessor) or a second successor starts a new chain; queue offsets
    are checked for continuity along a chain."""
    out = []
    by_node: dict[str, list[dict]] = {}
    for c in chunks:
        by_node.setdefault(c["node"], []).append(dict(c))
    chain_no = 0
    for cs in by_node.values():
        cs.sort(key=lambda c: (c["epoch"], c["start"]))
        continued: set[int] = set()
        by_end: dict[int, list[int]] = {}  # end offset -> earlier chunks ending there
        for i, c in enumerate(cs):
            prev = [j for j in by_end.get(c["start"], []) if j not in continued]
            by_end.setdefault(c["end"], []).append(i)
            if prev:
                j = max(prev, key=lambda j: cs[j]["epoch"])
                continued.add(j)
                c["chain"] = cs[j]["chain"]
            else:
                chain_no += 1
                c["chain"] = chain_no
        out += cs
    return out


_HEAD = msgfmt._HEAD  # TOTALSIZE .. BORNTIMESTAMP, one unpack per record
_I32 = msgfmt._I32
_V1, _V2, _BLANK = msgfmt.MAGIC_V1, msgfmt.MAGIC_V2, msgfmt.MAGIC_BLANK
_BORN6, _STORE6 = msgfmt.SYSFLAG_BORNHOST_V6, msgfmt.SYSFLAG_STOREHOST_V6


def check_chunk(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    """Check one chunk: the compiled walk (numba, :mod:`spark_jobs.fastscan`) when installed,
    else the vectorised scan (NumPy), else the record walk below; each hands anything unusual
    to the next and finally to the full decoder, so the results are the same."""
    if _np is not None and len(data) >= 64 * 1024:
        if fastscan.available():
            return check_chunk_nb(data, start, file_size, node)
        return check_chunk_np(data, start, file_size, node)
    return check_chunk_py(data, start, file_size, node)


def check_chunk_nb(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    """The compiled walk checks every record's framing, offsets, lengths and body CRC in one
    pass, then queue offset continuity per (topic, queueId) in a second compiled loop."""
    fast = fastscan.scan(data, start, file_size)
    if fast is not None:
        n, a, topic, tlen, qid, qo = fast
        queues = fastscan.queue_ranges(a, topic, tlen, qid, qo)
        if queues is not None:
            return [], queues, n
    return check_chunk_np(data, start, file_size, node)


# The 48 fixed bytes every non-BLANK record starts with (big-endian), read for all records at
# once through a sliding window over the chunk.
_HEADER_FIELDS = [
    ("total", ">i4"),  # TOTALSIZE: the record's length in bytes
    ("magic", ">u4"),  # MAGICCODE: V1, V2 or BLANK
    ("crc", ">i4"),  # BODYCRC: CRC-32 of the body masked to a non-negative Java int
    ("qid", ">i4"),  # QUEUEID
    ("flag", ">i4"),  # FLAG (not checked)
    ("qo", ">i8"),  # QUEUEOFFSET: the record's index in its (topic, queueId)
    ("phys", ">i8"),  # PHYSICALOFFSET: must equal the record's offset in the log
    ("sysflag", ">i4"),  # SYSFLAG: IPv6 host bits decide where the body length sits
    ("born", ">i8"),  # BORNTIMESTAMP (not checked)
]
_HEADER_BYTES = 48


def walk_starts(data: bytes) -> list[int] | None:
    """The record starts found by following TOTALSIZE from the chunk start; None when the
    chain does not end exactly at the chunk end or a size is below 8 (a BLANK's size)."""
    size = len(data)
    starts: list[int] = []
    add = starts.append
    i32 = _I32.unpack_from
    pos = 0
    try:
        for _ in range(size // 8 + 1):  # bound: every record is at least 8 bytes
            if pos >= size:
                break
            add(pos)
            pos += i32(data, pos)[0]
    except Exception:  # struct.error: fewer than 4 bytes left, or an offset out of range
        return None
    if pos != size:
        return None
    return starts


def _be(win, at, dtype: str):
    """Big-endian integers (``dtype``, e.g. ``>i4``) at byte positions ``at`` through the
    sliding window ``win`` of the chunk (as wide as the integer), as int64."""
    return win[at].view(dtype)[:, 0].astype(_np.int64)


def check_chunk_np(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    """One sequential pass over TOTALSIZE finds the record starts; every other field is gathered
    for all records at once (one 48-byte header row per record through a sliding window view,
    no copy of the chunk) and checked as arrays. Only the body CRCs stay a call per record
    (``zlib.crc32`` over memoryview slices, driven by ``map``)."""
    np = _np
    size = len(data)
    if size < _HEADER_BYTES:
        return check_chunk_py(data, start, file_size, node)
    starts = walk_starts(data)
    if starts is None:
        return _check_slow(data, start, file_size, node)
    a = np.frombuffer(data, dtype=np.uint8)
    win = np.lib.stride_tricks.sliding_window_view
    w2, w4 = win(a, 2), win(a, 4)
    s = np.asarray(starts, dtype=np.int64)
    ends = np.append(s[1:], size)
    total = ends - s
    if (total < 8).any():
        return _check_slow(data, start, file_size, node)
    magic = _be(w4, s + 4, ">u4")
    blank = magic == _BLANK
    if blank.any() and ((start + ends[blank]) % file_size).any():
        return _check_slow(data, start, file_size, node)
    m = ~blank
    ms, mt, me = s[m], total[m], ends[m]
    v2 = magic[m] == _V2
    if not (v2 | (magic[m] == _V1)).all() or (mt < 98).any():
        return _check_slow(data, start, file_size, node)
    head = win(a, _HEADER_BYTES)[ms].view(np.dtype(_HEADER_FIELDS))[:, 0]
    crc = head["crc"].astype(np.int64)
    qid = head["qid"].astype(np.int64)
    qo = head["qo"].astype(np.int64)
    sysflag = head["sysflag"].astype(np.int64)
    absolute = start + ms
    crosses = absolute // file_size != (start + me - 1) // file_size
    if (head["phys"] != absolute).any() or crosses.any():
        return _check_slow(data, start, file_size, node)
    p = ms + 48 + np.where(sysflag & _BORN6, 20, 8) + 8 + np.where(sysflag & _STORE6, 20, 8) + 12
    if (p + 4 > me).any():
        return _check_slow(data, start, file_size, node)
    blen = _be(w4, p, ">i4")
    body = p + 4
    tl_at = body + blen
    if (blen < 0).any() or (tl_at + 2 > me).any():
        return _check_slow(data, start, file_size, node)
    tlen = np.where(v2, _be(w2, tl_at, ">u2"), a[tl_at].astype(np.int64))
    topic = tl_at + np.where(v2, 2, 1)
    props = topic + tlen
    if (props + 2 > me).any() or (props + 2 + _be(w2, props, ">u2") != me).any():
        return _check_slow(data, start, file_size, node)
    view = memoryview(data)
    got = np.fromiter(
        map(zlib.crc32, map(view.__getitem__, map(slice, body.tolist(), tl_at.tolist()))),
        dtype=np.int64,
        count=len(body),
    )
    if ((got & 0x7FFFFFFF) != crc).any():
        return _check_slow(data, start, file_size, node)
    queues = _queue_ranges(a, topic, tlen, qid, qo)
    if queues is None:
        return _check_slow(data, start, file_size, node)
    return [], queues, len(starts)


def _queue_ranges(a, topic, tlen, qid, qo) -> dict | None:
    """{(topic, queueId): [first, last]} queue offsets of the records, or None when a queue's
    offsets are not contiguous in record order (or a topic hash collides): the slow path then
    names the record."""
    np = _np
    queues: dict = {}
    if not len(topic):
        return queues
    size = len(a)
    width = min(max(int(tlen.max()), 1), size)
    cols = np.arange(width)
    # the topic bytes of every record as one row each, through a sliding window; rows that
    # would run past the chunk end (only the last records, when a shorter topic sits there)
    # are gathered byte by byte instead
    at = np.minimum(topic, size - width)
    rows = np.lib.stride_tricks.sliding_window_view(a, width)[at]
    clipped = np.flatnonzero(at != topic)
    if len(clipped):
        rows[clipped] = a[np.minimum(topic[clipped, None] + cols, size - 1)]
    names = np.where(cols < tlen[:, None], rows, 0)
    # topic ids: a polynomial hash of the name bytes (and length), then a check that every
    # record's name equals its id's representative (a collision takes the slow path)
    weights = np.uint64(1099511628211) ** np.arange(width, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = (names.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
        h = h * np.uint64(31) + tlen.astype(np.uint64)
    _hashes, rep, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not (names == names[rep[inverse]]).all() or (tlen != tlen[rep[inverse]]).any():
        return None
    uniq = names[rep]
    key = inverse.astype(np.int64) * (1 << 32) + (qid & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    k, q = key[order], qo[order]
    same = k[1:] == k[:-1]
    if (same & (q[1:] != q[:-1] + 1)).any():
        return None
    firsts = np.flatnonzero(np.concatenate(([True], ~same)))
    lasts = np.concatenate((firsts[1:] - 1, [len(k) - 1]))
    for f, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
        t = int(k[f] >> 32)
        name = bytes(uniq[t][: int(tlen[order[f]])].astype(np.uint8)).decode("utf-8", "replace")
        queue = int(k[f] & 0xFFFFFFFF)
        queue = queue - (1 << 32) if queue >= 1 << 31 else queue
        queues[(name, queue)] = [int(q[f]), int(q[last])]
    return queues


def check_chunk_py(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    """Walk one chunk's records; returns (issues, {(topic, qid): [first, last]}, records).

    The fast path reads only what the checks need (one header unpack, the body CRC over a
    memoryview, the topic bytes); anything unusual is decoded in full by ``_check_slow``.
    """
    view = memoryview(data)
    size = len(data)
    queues: dict = {}
    head = _HEAD.unpack_from
    i32 = _I32.unpack_from
    crc32 = zlib.crc32
    pos = 0
    n = 0
    try:
        while pos < size:
            if size - pos < _HEAD.size:
                break
            total, magic, crc, qid, _flag, qo, phys, sysflag, _born = head(data, pos)
            end = pos + total
            off = start + pos
            if magic == _BLANK and total >= 8 and end <= size and (off + total) % file_size == 0:
                n += 1
                pos = end
                continue
            if magic not in (_V1, _V2) or total <= 0 or end > size:
                break
            p = pos + 48 + (20 if sysflag & _BORN6 else 8) + 8 + (20 if sysflag & _STORE6 else 8)
            p += 12
            (blen,) = i32(data, p)
            p += 4
            if blen < 0 or p + blen > end or phys != off:
                break
            if crc32(view[p : p + blen]) & 0x7FFFFFFF != crc:
                break
            p += blen
            if magic == _V1:
                tlen = data[p]
                p += 1
            else:
                tlen = int.from_bytes(data[p : p + 2], "big")
                p += 2
            if off // file_size != (end - 1) // file_size:
                break
            key = (data[p : p + tlen], qid)
            p += tlen
            if p + 2 + int.from_bytes(data[p : p + 2], "big") != end:
                break  # the properties must end exactly where TOTALSIZE says
            q = queues.get(key)
            if q is None:
                queues[key] = [qo, qo]
            elif qo != q[1] + 1:
                break
            else:
                q[1] = qo
            n += 1
            pos = end
    except (IndexError, ValueError):
        pass
    if pos >= size:
        return [], {(t.decode("utf-8", "replace"), q): v for (t, q), v in queues.items()}, n
    # something unusual at ``pos``: the full decoder takes over from the chunk start
    return _check_slow(data, start, file_size, node)


def _check_slow(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    issues: list[tuple] = []
    queues: dict[tuple[str, int], list[int]] = {}
    pos = 0
    n = 0
    size = len(data)
    while pos < size:
        off = start + pos
        try:
            rec = msgfmt.decode_record(data, pos, base_offset=start, source=node)
        except CorruptRecordError as exc:
            issues.append((off, "record_malformed", exc.reason, None, None))
            return issues, queues, n
        n += 1
        if rec.is_blank:
            if rec.end % file_size:
                issues.append(
                    (off, "blank_not_at_file_end", f"BLANK ends at {rec.end}", None, None)
                )
        else:
            if rec.stored_physical_offset != off:
                issues.append(
                    (
                        off,
                        "physical_offset_mismatch",
                        f"record says {rec.stored_physical_offset}",
                        rec.topic,
                        rec.queue_id,
                    )
                )
            if off // file_size != (rec.end - 1) // file_size:
                issues.append((off, "crosses_file_end", f"ends at {rec.end}", rec.topic, None))
            if not rec.crc_ok:
                issues.append(
                    (
                        off,
                        "crc_mismatch",
                        f"bodyCRC {rec.body_crc} != {msgfmt.body_crc(rec.body)} "
                        f"(queueOffset {rec.queue_offset}, msgId {rec.msg_id})",
                        rec.topic,
                        rec.queue_id,
                    )
                )
            key = (rec.topic, rec.queue_id)
            q = queues.get(key)
            if q is None:
                queues[key] = [rec.queue_offset, rec.queue_offset]
            else:
                if rec.queue_offset != q[1] + 1:
                    issues.append(
                        (
                            off,
                            "queue_offset_gap",
                            f"expected queue offset {q[1] + 1}, found {rec.queue_offset}",
                            rec.topic,
                            rec.queue_id,
                        )
                    )
                q[1] = rec.queue_offset
        pos += rec.total_size
    return issues, queues, n


# One row layout for everything the executors send back, from both Spark jobs of an audit
# (replica comparison windows and chunk checks): small aggregates, never a row per record.
SCAN_FIELDS = [
    ("kind", "string"),  # range | issue | queue | count | window
    ("pair", "string"),  # range: "master->slave"
    ("start", "long"),  # range: first offset; issue/queue/count: the chunk's start
    ("end", "long"),  # range: end offset; count: the chunk's end
    ("verdict", "string"),  # range: match, divergent, master_only, slave_only, neither...
    ("detail", "string"),  # range and issue detail
    ("node", "string"),  # issue/queue/count: the chunk's node
    ("key", "string"),  # issue/queue/count: the chunk's object key
    ("offset", "long"),  # issue: the record's log offset
    ("check", "string"),  # issue: crc_mismatch, queue_offset_gap, ...
    ("topic", "string"),  # queue
    ("queue_id", "int"),  # queue
    ("first_qo", "long"),  # queue: first queue offset in the chunk
    ("last_qo", "long"),  # queue: last queue offset in the chunk
    ("records", "long"),  # count: records checked in the chunk (BLANKs included)
    ("check_s", "double"),  # count: wall seconds inside the record checks of this chunk
    ("check_cpu_s", "double"),  # count: CPU seconds of the same
    ("read_s", "double"),  # window: wall seconds reading both sides' bytes
    ("compare_s", "double"),  # window: wall seconds comparing them
]
SCAN_COLUMNS = [name for name, _ in SCAN_FIELDS]
SCAN_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in SCAN_FIELDS)
_BLANK_ROW = dict.fromkeys(SCAN_COLUMNS)


def scan_row(**fields) -> tuple:
    return tuple({**_BLANK_ROW, **fields}[c] for c in SCAN_COLUMNS)


def chunk_rows(node: str, key: str, start: int, data: bytes, file_size: int) -> list[tuple]:
    """Check one chunk's bytes; its issues, per-queue first/last queue offsets and one count
    row (with the seconds the checks took), in the ``SCAN_FIELDS`` layout."""
    t0, c0 = time.perf_counter(), time.thread_time()
    issues, queues, n = check_chunk(data, start, file_size, node)
    check_s, check_cpu_s = time.perf_counter() - t0, time.thread_time() - c0
    rows = [
        scan_row(kind="issue", start=start, node=node, key=key, offset=off, check=check,
                 detail=detail, topic=topic, queue_id=qid)
        for off, check, detail, topic, qid in issues
    ]  # fmt: skip
    rows += [
        scan_row(kind="queue", start=start, node=node, key=key, topic=topic, queue_id=qid,
                 first_qo=first, last_qo=last)
        for (topic, qid), (first, last) in queues.items()
    ]  # fmt: skip
    rows.append(
        scan_row(kind="count", start=start, end=start + len(data), node=node, key=key,
                 records=n, check_s=check_s, check_cpu_s=check_cpu_s)
    )  # fmt: skip
    return rows


def _check_partition(spec: StoreSpec):
    def run(chunks: Iterator[tuple]) -> Iterator[tuple]:
        store = executor_store(spec)
        for node, key, start, end, file_size in chunks:
            data = store.get_range(key, 0, end - start)
            yield from chunk_rows(node, key, start, data, int(file_size))

    return run


def run_log_integrity(spark, spec: StoreSpec, chunks: list[dict]) -> list[dict]:
    """One Spark job: the executors read and check ``chunks`` and return ``SCAN_FIELDS`` rows
    (issues, per-queue first/last offsets, record counts); :func:`judge` turns them into
    findings. No job at all when there is no chunk."""
    if not chunks:
        return []
    rows = [(c["node"], c["key"], c["start"], c["end"], c["mappedFileSize"]) for c in chunks]
    n_parts = task_partitions(spark, len(rows))
    rows = deal(sorted(rows, key=lambda r: r[2] - r[3]), n_parts)  # largest first, round-robin
    schema = "node string, key string, start long, end long, mappedFileSize long"
    return run_tasks(spark, rows, schema, n_parts, _check_partition(spec), SCAN_SCHEMA)


@dataclass
class IntegrityResult:
    issues: list[dict]  # node, offset, check, detail; sorted by (node, offset)
    records: int  # records checked (BLANK fillers included)
    check_s: float  # wall seconds inside the record checks, summed over chunks
    check_cpu_s: float  # CPU seconds of the same


def judge(rows: list[dict], chunks: list[dict]) -> IntegrityResult:
    """Findings from the executors' rows for ``chunks`` (every chunk whose records were checked):
    their own issues, then queue offset continuity across the chunks of each chain, judged here
    over the per-chunk first/last queue offsets."""
    chain_of = {c["key"]: c["chain"] for c in assign_chains(chunks)}
    issues = [
        {k: r[k] for k in ("node", "offset", "check", "detail")}
        for r in rows
        if r["kind"] == "issue"
    ]
    counts = [r for r in rows if r["kind"] == "count"]
    chains: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["kind"] == "queue":
            key = (r["node"], chain_of[r["key"]], r["topic"], r["queue_id"])
            chains.setdefault(key, []).append(r)
    for (node, _chain, topic, qid), qs in sorted(chains.items(), key=lambda kv: str(kv[0])):
        qs.sort(key=lambda r: r["start"])
        for prev, cur in zip(qs, qs[1:], strict=False):
            if cur["first_qo"] != prev["last_qo"] + 1:
                issues.append(
                    {
                        "node": node,
                        "offset": cur["start"],
                        "check": "queue_offset_gap",
                        "detail": f"topic {topic} queue {qid}: expected queue offset "
                        f"{prev['last_qo'] + 1}, found {cur['first_qo']}",
                    }
                )
    issues.sort(key=lambda i: (i["node"], i["offset"]))
    return IntegrityResult(
        issues,
        int(sum(r["records"] for r in counts)),
        float(sum(r["check_s"] for r in counts)),
        float(sum(r["check_cpu_s"] for r in counts)),
    )
