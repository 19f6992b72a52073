"""The record walk of log integrity compiled with numba (optional): one pass over a chunk that
follows TOTALSIZE and checks every record's framing, magic code, physical offset, file bounds,
body/topic/properties lengths and body CRC, calling a C ``crc32`` once per body without a Python
call in between: libdeflate's from the ``deflate`` wheel (the ``audit`` extra), else zlib's (the
library Python's own ``zlib`` module uses); ``_walk_nb_kernels.CRC32_LIBRARY`` says which.

:func:`scan` returns the arrays the queue offset check needs, or ``None`` when numba or a crc32
library is missing, or when anything in the chunk is unusual: the caller then falls back to the
NumPy scan / full decoder of ``contracts.record_walk``, so the findings are the same either way.
Compiled code is cached next to ``_walk_nb_kernels.py`` (``cache=True``): compiled once per
installation, then loaded by each new Python worker (numba import included; the cost is in
spark_jobs/README.md, "Speed").
"""

from __future__ import annotations

import numpy as np

_KERNELS: list = []  # the loaded kernels module, or None when numba/crc32 is missing


def _kernels():
    if not _KERNELS:
        try:
            from contracts import _walk_nb_kernels as k
        except (ImportError, OSError, RuntimeError):  # no numba, or no crc32 library to call
            k = None
        _KERNELS.append(k)
    return _KERNELS[0]


def available() -> bool:
    """Whether the compiled walk can run here (imports numba on first call)."""
    return _kernels() is not None


def warm() -> bool:
    """Load (or compile) the kernels now, e.g. while workers start; False without numba."""
    k = _kernels()
    if k is None:
        return False
    empty = np.zeros(0, np.int64)
    chunk = np.frombuffer(bytes(8), np.uint8)  # read-only, as the real chunks
    k.walk(chunk, chunk.ctypes.data, 0, 1, empty, empty, empty, empty)
    k.queues(chunk, empty, empty, empty, empty)
    return True


def queue_ranges(a, topic, tlen, qid, qo) -> dict | None:
    """{(topic, queueId): [first, last]} queue offsets, or None when a queue skips in record
    order or topic hashes collide (the NumPy path or the full decoder then decides)."""
    if not len(topic):
        return {}
    rep, first, last = _kernels().queues(a, topic, tlen, qid, qo)
    if not len(rep):
        return None
    out = {}
    for r, f, last_qo in zip(rep.tolist(), first.tolist(), last.tolist(), strict=True):
        t0 = int(topic[r])
        name = bytes(a[t0 : t0 + int(tlen[r])]).decode("utf-8", "replace")
        key = (name, int(qid[r]))
        if key in out:  # two hashes for one (topic, queue): cannot happen; be safe
            return None
        out[key] = [int(f), int(last_qo)]
    return out


def scan(data: bytes, start: int, file_size: int):
    """``(records, a, topic, tlen, qid, qo)`` for a chunk whose records all pass the framing,
    offset, length and CRC checks (arrays over its non-BLANK records; ``a`` is the chunk as a
    uint8 array), else None (numba missing or something unusual: use the other paths)."""
    if not data or not available():
        return None
    a = np.frombuffer(data, dtype=np.uint8)
    cap = len(data) // 98 + 1  # a non-BLANK record is at least 98 bytes
    topic = np.empty(cap, np.int64)
    tlen = np.empty(cap, np.int64)
    qid = np.empty(cap, np.int64)
    qo = np.empty(cap, np.int64)
    n, m = _kernels().walk(a, a.ctypes.data, start, file_size, topic, tlen, qid, qo)
    if n < 0:
        return None
    return n, a, topic[:m], tlen[:m], qid[:m], qo[:m]


#: distinct topics (and, apart, store hosts) one chunk may hold for the compiled ``messages``
TABLE_ROWS = 1024


def message_fields(data: bytes, start: int):
    """The compiled ``messages`` kernel over a chunk the walk found sound: ``(rows, topics,
    hosts)`` int64 arrays (see :func:`contracts.record_walk.message_fields`), or None (numba
    missing, something unusual, too many topics): the Python walk then does it."""
    if not data or not available():
        return None
    a = np.frombuffer(data, dtype=np.uint8)
    out = np.empty((len(data) // 98 + 1, 7), np.int64)
    tables = np.empty((2 * TABLE_ROWS, 2), np.int64)
    m, nt, nh = _kernels().messages(a, start, out, tables)
    if m < 0:
        return None
    return out[:m], tables[:nt], tables[TABLE_ROWS : TABLE_ROWS + nh]
