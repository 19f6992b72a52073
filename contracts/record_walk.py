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

The other readers of records in place walk with the same decoder, from here:

- ``walk_valid`` / ``valid_step`` (:mod:`contracts._walk_valid`): records valid in place, one
  file at a time, stopping at the first that is not (why named): the store's recovery (torn
  tail vs damage, checkCRCOnRecover), its file scan and ``haproof store repair``;
- ``walk_records`` / ``scan_frames`` / ``store_timestamp`` (:mod:`contracts._walk_frames`): the
  archive shipper's record scan (framing and body CRC, no host or properties decoding) and its
  frame chain by TOTALSIZE and MAGIC.
"""

from __future__ import annotations

from contracts._walk_frames import ScannedRecord, scan_frames, store_timestamp, walk_records
from contracts._walk_py import check_chunk_py, check_slow
from contracts._walk_valid import valid_step, walk_valid

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
    "scan_frames",
    "store_timestamp",
    "valid_step",
    "walk_records",
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
