"""The record walk vectorised with NumPy: one pass over TOTALSIZE, every other field checked
for all records at once; anything unusual goes to :func:`contracts._walk_py.check_slow`."""

from __future__ import annotations

import zlib

import numpy as _np

from contracts._walk_py import check_chunk_py
from contracts._walk_py import check_slow as _check_slow
from contracts.record.layout import (
    I32,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
)
from contracts.record.prop_crc import CRC32_RESERVED_LEN, PROPERTY_CRC32, carried_crc_ok

_I32 = I32
_V1, _V2, _BLANK = MAGIC_V1, MAGIC_V2, MAGIC_BLANK
_BORN6, _STORE6 = SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
_CRC_KEY = PROPERTY_CRC32.encode() + b"\x01"


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
    if ((got & 0x7FFFFFFF) != crc).any() or not _prop_crcs_ok(a, data, ms, mt, me):
        return _check_slow(data, start, file_size, node)
    queues = _queue_ranges(a, topic, tlen, qid, qo)
    if queues is None:
        return _check_slow(data, start, file_size, node)
    return [], queues, len(starts)


def _prop_crcs_ok(a, data: bytes, ms, mt, me) -> bool:
    """Whether no record fails its CRC property (``prop_crc.py``): only the records whose
    last 20 bytes start with the property's key, or that end with three zero bytes, can."""
    np = _np
    key = np.frombuffer(_CRC_KEY, np.uint8)
    at = me - CRC32_RESERVED_LEN
    keyed = (np.lib.stride_tricks.sliding_window_view(a, len(key))[at] == key).all(axis=1)
    zeros = (a[me - 1] == 0) & (a[me - 2] == 0) & (a[me - 3] == 0)
    which = np.flatnonzero(keyed | zeros)
    if not len(which):
        return True
    view = memoryview(data)
    return all(
        carried_crc_ok(view, p, t) is not False
        for p, t in zip(ms[which].tolist(), mt[which].tolist(), strict=True)
    )


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
