"""One walk over a byte range of commit log records, the check every reader shares: records
chain (``next = offset + size``), magic codes, physical offsets, BLANK only at file ends, no
record across a file end, lengths that add up, body CRCs, and queue offsets contiguous per
(topic, queueId) within the range.

``check_chunk(data, start, file_size, node)`` returns ``(issues, queues, records)``: issue
tuples ``(offset, check, detail, topic, queueId, queueOffset, msgId, expected, found)``, the
first/last queue offset per ``(topic, queueId)``, and the number of records (BLANKs included).

Three implementations give the same results (parity tests in tests/contracts): the walk compiled
with numba (``_walk_nb``, when numba is installed), the NumPy scan (``_walk_np``) and pure
Python (``_walk_py``); each hands anything unusual to the next and finally to the full decoder
(``check_slow``), which names every issue. The fastest available is picked at import.

The other readers of records in place share one walk, :func:`walk_in_place`
(:mod:`contracts._walk_valid`): one loop and one "valid in place" predicate (a plain frame that
decodes; at its own physical offset, BLANK only at the file end and the body CRC when asked),
what to extract per record being its ``decode`` parameter:

- ``walk_valid`` / ``valid_step``: the full decoder, every check: the store's recovery (torn
  tail vs damage, checkCRCOnRecover), its file scan and ``haproof store repair``;
- ``record_scanner()`` (:mod:`contracts._scan_record`): the archive shipper's scan of a store
  directory (framing and body CRC, no host or properties decoding; CRC failures are reported,
  not stops), and no decoding at all for a live node's own, trusted bytes (frames chained by
  TOTALSIZE and MAGIC; ``store_timestamp`` reads the one field it needs).
"""

from __future__ import annotations

from contracts._scan_record import ScannedRecord, record_scanner, store_timestamp
from contracts._walk_py import check_chunk_py, check_slow, key_hash, message_fields_py
from contracts._walk_valid import valid_step, walk_in_place, walk_valid

try:
    from contracts import _walk_nb as fastscan
    from contracts._walk_np import check_chunk_np
except ImportError:  # no NumPy: the Python walk does the same work, slower
    fastscan = None
    check_chunk_np = None

__all__ = [
    "ScannedRecord",
    "check_chunk",
    "check_chunk_nb",
    "check_chunk_np",
    "check_chunk_py",
    "check_slow",
    "key_hash",
    "message_fields",
    "record_scanner",
    "store_timestamp",
    "valid_step",
    "walk_in_place",
    "walk_valid",
]


def check_chunk(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    """Check one chunk: the compiled walk (numba, :mod:`contracts._walk_nb`) when installed,
    else the vectorised scan (NumPy), else the Python walk; each hands anything unusual
    to the next and finally to the full decoder, so the results are the same."""
    if check_chunk_np is not None and len(data) >= 64 * 1024:
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


#: the columns of :func:`message_fields` rows
MESSAGE_FIELDS = ("log_offset", "at", "topic", "uniq_pos", "uniq_len", "host", "key_hash")


def message_fields(data: bytes, start: int, compiled: bool = True):
    """What the ``delivery`` check needs of every message of a chunk ``check_chunk`` found
    sound (no issues): ``(rows, topics, hosts)``, int64 arrays; ``rows`` one per non-BLANK record
    with ``MESSAGE_FIELDS`` (UNIQ_KEY as its position in ``data`` and length, -1 without one;
    topic and store host as ids into ``topics`` / ``hosts``, rows of (position, length) in order
    of first appearance; ``key_hash`` of topic and UNIQ_KEY, :func:`key_hash`). The compiled
    walk when numba is there (``compiled``), else Python; the same arrays either way. None
    for a chunk that is not sound (the caller decodes its records)."""
    got = fastscan.message_fields(data, start) if compiled and fastscan is not None else None
    if got is not None:
        return got
    py = message_fields_py(data, start)
    if py is None:
        return None
    import numpy as np

    rows, topics, hosts = (
        np.array(x, np.int64).reshape(-1, w) for x, w in zip(py, (7, 2, 2), strict=True)
    )
    return rows, topics, hosts
