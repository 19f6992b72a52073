"""Where the records of one topic start in a chunk, by the TOTALSIZE chain and each record's
topic field (no CRC, no decoding): compiled with numba when installed (a few ms for a 64 MiB
chunk), else the same loop in Python. The layout is ``contracts/record/layout.py``'s: SYSFLAG at
36, the hosts' widths from it, BODYLENGTH after them, the topic after the body (a one-byte
length in v1, two in v2). Anything unusual ends the walk: log integrity reports it."""

from __future__ import annotations

import numpy as np

from contracts.record.layout import (
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
)


def _starts_of_topic(a, needle, out) -> int:
    n, pos, found = len(a), 0, 0
    while pos + 8 <= n and found < len(out):  # (the walk's queue range says how many)
        total = (a[pos] << 24) | (a[pos + 1] << 16) | (a[pos + 2] << 8) | a[pos + 3]
        magic = (a[pos + 4] << 24) | (a[pos + 5] << 16) | (a[pos + 6] << 8) | a[pos + 7]
        if total <= 0 or pos + total > n or total >= 2**31:
            break
        if magic == MAGIC_BLANK:
            break
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            break
        sysflag = a[pos + 39]  # the low byte holds both host flags
        born = 20 if sysflag & SYSFLAG_BORNHOST_V6 else 8
        store = 20 if sysflag & SYSFLAG_STOREHOST_V6 else 8
        p = pos + 68 + born + store
        if p + 4 > pos + total:
            break
        body = (a[p] << 24) | (a[p + 1] << 16) | (a[p + 2] << 8) | a[p + 3]
        p += 4 + body
        if magic == MAGIC_V2:
            if p + 2 > pos + total:
                break
            tlen = (a[p] << 8) | a[p + 1]
            p += 2
        else:
            if p + 1 > pos + total:
                break
            tlen = a[p]
            p += 1
        if tlen == len(needle) and p + tlen <= pos + total:
            same = True
            for i in range(tlen):
                if a[p + i] != needle[i]:
                    same = False
                    break
            if same:
                out[found] = pos
                found += 1
        pos += total
    return found


try:
    import numba

    _compiled = numba.njit(cache=True, nogil=True)(_starts_of_topic)
except ImportError:  # the Python loop over the same arrays
    _compiled = None


def starts_of_topic(data: bytes, topic: bytes, most: int) -> list[int]:
    """Positions (in ``data``) of the first ``most`` records whose topic is ``topic``."""
    a = np.frombuffer(data, dtype=np.uint8).astype(np.int64) if _compiled is None else None
    out = np.zeros(max(most, 0), np.int64)
    needle = np.frombuffer(topic, dtype=np.uint8).astype(np.int64)
    if _compiled is not None:
        found = _compiled(np.frombuffer(data, dtype=np.uint8), needle, out)
    else:
        found = _starts_of_topic(a.tolist(), needle.tolist(), out)
    return out[:found].tolist()
