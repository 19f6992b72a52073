"""What a divergent range carries as its witness, beside the two decoded records: how many bytes
differ inside the compared range (not the range's length), and a window of both replicas'
bytes around the first differing one, for the report's hex/ASCII view.

The window is ``WINDOW_BYTES`` either side of the first differing byte, cut to the compared
sub-range (both sides hold exactly those bytes there), as hex strings of equal length.
"""

from __future__ import annotations

import json

WINDOW_BYTES = 64


def first_difference(a: bytes, b: bytes) -> int:
    """Index of the first differing byte of two unequal, equally long byte strings (memcmp by
    64 KiB blocks, then byte by byte inside the block)."""
    step = 1 << 16
    for i in range(0, len(a), step):
        x, y = a[i : i + step], b[i : i + step]
        if x != y:
            return i + next(k for k in range(len(x)) if x[k] != y[k])
    raise ValueError("the byte strings are equal")


def differing_bytes(a: bytes, b: bytes) -> int:
    """How many positions of two equally long byte strings differ."""
    try:
        import numpy as np
    except ImportError:  # the audit extra brings NumPy; a plain loop otherwise
        return sum(x != y for x, y in zip(a, b, strict=True))
    return int(np.count_nonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8)))


def divergence_detail(start: int, mb: bytes, sb: bytes, i: int, master_rec, slave_rec) -> dict:
    """The detail of a divergent range [start + i, start + len(mb)) whose bytes are ``mb``
    (master) and ``sb`` (slave) from ``start``, first differing at index ``i``."""
    lo, hi = max(0, i - WINDOW_BYTES), min(len(mb), i + WINDOW_BYTES)
    return {
        "firstDifferingOffset": start + i,
        "differingBytes": differing_bytes(mb[i:], sb[i:]),
        "window": {"start": start + lo, "master": mb[lo:hi].hex(), "slave": sb[lo:hi].hex()},
        "master": master_rec,
        "slave": slave_rec,
    }


def merged_detail(first: str, later: str) -> str:
    """The detail of two adjacent divergent ranges merged into one: the first's witness, the
    differing bytes of both."""
    try:
        a, b = json.loads(first), json.loads(later)
    except ValueError:
        return first
    if isinstance(a, dict) and isinstance(b, dict) and "differingBytes" in a:
        a["differingBytes"] = int(a["differingBytes"]) + int(b.get("differingBytes") or 0)
        return json.dumps(a, sort_keys=True)
    return first
