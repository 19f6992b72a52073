"""Check 3, log integrity, per node: records chain, magic codes, body CRCs, BLANK only at file
ends, records inside one file, and queue offsets contiguous per (topic, queueId).

read: one Spark task per archived chunk (executors fetch the chunk's bytes);
transform: per-chunk issues + per-queue summaries, then a window over chunks for queue offset
continuity across chunk boundaries; write: the ``records_issues`` rows.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pandas as pd

try:
    import numpy as _np
except ImportError:  # the record walk below does the same work, slower
    _np = None

from broker.archive.object_store import StoreSpec
from broker.errors import CorruptRecordError
from broker.store import message as msgfmt
from spark_jobs.archive_reader import executor_store
from spark_jobs.session import default_parallelism, rows_frame

ISSUE_SCHEMA = (
    "kind string, node string, offset long, check string, detail string, topic string, "
    "queue_id int, first_qo long, last_qo long, chunk_start long, records long, chain int"
)
CHUNK_COLUMNS = ["node", "key", "start", "end", "mappedFileSize", "epoch", "chain"]


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
        for i, c in enumerate(cs):
            prev = [j for j in range(i) if cs[j]["end"] == c["start"] and j not in continued]
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
    """Check one chunk: the vectorised scan (NumPy) when available, else the record walk below;
    both hand anything unusual to the full decoder, so the results are the same."""
    if _np is not None and len(data) >= 64 * 1024:
        return check_chunk_np(data, start, file_size, node)
    return check_chunk_py(data, start, file_size, node)


def _be(a, at, width: int):
    """Big-endian signed integers of ``width`` bytes at the byte positions ``at`` of ``a``."""
    idx = at[:, None] + _np.arange(width)
    return a[idx].copy().view(f">i{width}")[:, 0].astype(_np.int64)


def check_chunk_np(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    """One sequential pass over TOTALSIZE finds the record starts; every other field is gathered
    for all records at once with fancy indexing and checked as arrays. Only the body CRCs stay a
    call per record (``zlib.crc32`` over a memoryview)."""
    np = _np
    size = len(data)
    starts = []
    add = starts.append
    i32 = _I32.unpack_from
    pos = 0
    try:
        while pos < size:
            add(pos)
            (total,) = i32(data, pos)
            if total < 8:
                return _check_slow(data, start, file_size, node)
            pos += total
    except Exception:  # struct.error: fewer than 4 bytes left
        return _check_slow(data, start, file_size, node)
    if pos != size:
        return _check_slow(data, start, file_size, node)
    a = np.frombuffer(data, dtype=np.uint8)
    s = np.asarray(starts, dtype=np.int64)
    total = _be(a, s, 4)
    magic = _be(a, s + 4, 4) & 0xFFFFFFFF
    ends = s + total
    blank = magic == (_BLANK & 0xFFFFFFFF)
    if blank.any() and ((start + ends[blank]) % file_size).any():
        return _check_slow(data, start, file_size, node)
    m = ~blank
    ms, mt, me = s[m], total[m], ends[m]
    v2 = magic[m] == (_V2 & 0xFFFFFFFF)
    if not (v2 | (magic[m] == (_V1 & 0xFFFFFFFF))).all() or (mt < 98).any():
        return _check_slow(data, start, file_size, node)
    crc = _be(a, ms + 8, 4) & 0xFFFFFFFF
    qid = _be(a, ms + 12, 4)
    qo = _be(a, ms + 20, 8)
    phys = _be(a, ms + 28, 8)
    sysflag = _be(a, ms + 36, 4)
    absolute = start + ms
    crosses = absolute // file_size != (start + me - 1) // file_size
    if (phys != absolute).any() or crosses.any():
        return _check_slow(data, start, file_size, node)
    p = ms + 48 + np.where(sysflag & _BORN6, 20, 8) + 8 + np.where(sysflag & _STORE6, 20, 8) + 12
    if (p + 4 > me).any():
        return _check_slow(data, start, file_size, node)
    blen = _be(a, p, 4)
    body = p + 4
    tl_at = body + blen
    if (blen < 0).any() or (tl_at + 2 > me).any():
        return _check_slow(data, start, file_size, node)
    tlen = np.where(v2, _be(a, tl_at, 2) & 0xFFFF, a[tl_at].astype(np.int64))
    topic = tl_at + np.where(v2, 2, 1)
    props = topic + tlen
    if (props + 2 > me).any() or (props + 2 + (_be(a, props, 2) & 0xFFFF) != me).any():
        return _check_slow(data, start, file_size, node)
    view = memoryview(data)
    crc32 = zlib.crc32
    got = [
        crc32(view[b:e]) & 0x7FFFFFFF for b, e in zip(body.tolist(), tl_at.tolist(), strict=True)
    ]
    if (np.asarray(got, dtype=np.int64) != crc).any():
        return _check_slow(data, start, file_size, node)
    queues: dict = {}
    if len(ms):
        width = int(tlen.max())
        cols = topic[:, None] + np.arange(max(width, 1))
        names = np.where(np.arange(max(width, 1)) < tlen[:, None], a[np.minimum(cols, size - 1)], 0)
        # topic ids: a polynomial hash of the name bytes (and length), then a check that every
        # record's name equals its id's representative (a collision takes the slow path)
        weights = np.uint64(1099511628211) ** np.arange(names.shape[1], dtype=np.uint64)
        with np.errstate(over="ignore"):
            h = (names.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
            h = h * np.uint64(31) + tlen.astype(np.uint64)
        hashes, rep, inverse = np.unique(h, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        if not (names == names[rep[inverse]]).all() or (tlen != tlen[rep[inverse]]).any():
            return _check_slow(data, start, file_size, node)
        uniq = names[rep]
        key = inverse.astype(np.int64) * (1 << 32) + (qid & 0xFFFFFFFF)
        order = np.argsort(key, kind="stable")
        k, q = key[order], qo[order]
        same = k[1:] == k[:-1]
        if (same & (q[1:] != q[:-1] + 1)).any():
            return _check_slow(data, start, file_size, node)
        firsts = np.flatnonzero(np.concatenate(([True], ~same)))
        lasts = np.concatenate((firsts[1:] - 1, [len(k) - 1]))
        for f, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
            t = int(k[f] >> 32)
            name = bytes(uniq[t][: int(tlen[order[f]])].astype(np.uint8)).decode("utf-8", "replace")
            queue = int(k[f] & 0xFFFFFFFF)
            queue = queue - (1 << 32) if queue >= 1 << 31 else queue
            queues[(name, queue)] = [int(q[f]), int(q[last])]
    return [], queues, len(starts)


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


def _check_partition(spec: StoreSpec):
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        store = executor_store(spec)
        for pdf in batches:
            rows = []
            for c in pdf.itertuples(index=False):
                data = store.get_range(c.key, 0, c.end - c.start)
                issues, queues, n = check_chunk(data, c.start, c.mappedFileSize, c.node)
                for off, check, detail, topic, qid in issues:
                    rows.append(
                        ("issue", c.node, off, check, detail, topic, qid, None, None, c.start,
                         None, c.chain)
                    )  # fmt: skip
                for (topic, qid), (first, last) in queues.items():
                    rows.append(
                        ("queue", c.node, None, None, None, topic, qid, first, last, c.start,
                         None, c.chain)
                    )  # fmt: skip
                rows.append(
                    ("count", c.node, None, None, None, None, None, None, None, c.start, n, c.chain)
                )
            yield pd.DataFrame(
                rows,
                columns=[
                    "kind", "node", "offset", "check", "detail", "topic", "queue_id",
                    "first_qo", "last_qo", "chunk_start", "records", "chain",
                ],
            )  # fmt: skip

    return run


def run_log_integrity(spark, spec: StoreSpec, chunks: list[dict]) -> tuple[list[dict], int]:
    """Returns (issues as dicts ``node, offset, check, detail``, records checked).

    One Spark job: the executors read and check the chunks and return small per-chunk rows
    (issues, per-queue first/last offsets, record counts); queue continuity across the chunks of
    a chain is then judged on the driver over those summaries."""
    if not chunks:
        return [], 0
    rows = [tuple(c[k] for k in CHUNK_COLUMNS) for c in assign_chains(chunks)]
    n_parts = max(1, min(len(rows), default_parallelism(spark) * 4))
    df = rows_frame(
        spark,
        rows,
        "node string, key string, start long, end long, mappedFileSize long, epoch long, chain int",
        n_parts,
    )
    out = [r.asDict() for r in df.mapInPandas(_check_partition(spec), ISSUE_SCHEMA).collect()]
    issues = [
        {k: r[k] for k in ("node", "offset", "check", "detail")}
        for r in out
        if r["kind"] == "issue"
    ]
    records = sum(r["records"] for r in out if r["kind"] == "count")
    chains: dict[tuple, list[dict]] = {}
    for r in out:
        if r["kind"] == "queue":
            chains.setdefault((r["node"], r["chain"], r["topic"], r["queue_id"]), []).append(r)
    for (node, _chain, topic, qid), qs in sorted(chains.items(), key=lambda kv: str(kv[0])):
        qs.sort(key=lambda r: r["chunk_start"])
        for prev, cur in zip(qs, qs[1:], strict=False):
            if cur["first_qo"] != prev["last_qo"] + 1:
                issues.append(
                    {
                        "node": node,
                        "offset": cur["chunk_start"],
                        "check": "queue_offset_gap",
                        "detail": f"topic {topic} queue {qid}: expected queue offset "
                        f"{prev['last_qo'] + 1}, found {cur['first_qo']}",
                    }
                )
    issues.sort(key=lambda i: (i["node"], i["offset"]))
    return issues, int(records)
