"""Compiled kernels of :mod:`contracts._walk_nb` (imports numba: loaded only when a chunk is
checked, never by ``import spark_jobs.log_integrity``)."""

from __future__ import annotations

import ctypes
import ctypes.util

import numba
import numpy as np
from llvmlite import binding as _llvm
from numba import types as _nt

from contracts.record.layout import (
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
)
from contracts.record.prop_crc import CRC32_RESERVED_LEN, PROPERTY_CRC32


def _crc32_function() -> tuple[str, int]:
    """(name, address) of the C crc32 the walk calls: libdeflate's ``libdeflate_crc32`` from the
    ``deflate`` wheel (PCLMUL/AVX-512 folding: ~2.6 ms per 64 MiB of 1 KiB bodies here, against
    ~23 ms for zlib's) when installed, else zlib's ``crc32`` (the library Python's zlib module
    uses). Both compute CRC-32/ISO-HDLC, zlib's; on the ABIs numba targets both take
    ``(crc, pointer, length)`` in integer registers and return the CRC in the low 32 bits."""
    try:
        import deflate._deflate as wheel

        lib = ctypes.CDLL(wheel.__file__)
        return "libdeflate", ctypes.cast(lib.libdeflate_crc32, ctypes.c_void_p).value
    except (ImportError, OSError, AttributeError):
        lib = ctypes.CDLL(ctypes.util.find_library("z") or "libz.so.1")
        return "zlib", ctypes.cast(lib.crc32, ctypes.c_void_p).value


# The chosen function made visible to compiled code under one fixed name, so the code cached
# on disk (cache=True) stays valid whichever library serves it; the buffer goes as an address.
CRC32_LIBRARY, _address = _crc32_function()
_llvm.add_symbol("haproof_body_crc32", _address)
_CRC32 = _nt.ExternalFunction("haproof_body_crc32", _nt.uint32(_nt.uint32, _nt.uintp, _nt.uintp))

_V1, _V2, _BLANK = MAGIC_V1, MAGIC_V2, MAGIC_BLANK
# the record CRC property's key and length (contracts/record/prop_crc.py), as compiled constants
_KEY = np.frombuffer(PROPERTY_CRC32.encode() + b"\x01", np.uint8).copy()
_CRC_LEN = CRC32_RESERVED_LEN
_BORN6, _STORE6 = SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6


@numba.njit(cache=True, nogil=True)
def _be(a, p, width):
    """Unsigned big-endian integer of ``width`` bytes at ``a[p]``."""
    v = 0
    for k in range(width):
        v = (v << 8) | np.int64(a[p + k])
    return v


@numba.njit(cache=True, nogil=True)
def _signed(v, width):
    """``v`` (``width`` < 8 bytes, unsigned) as a signed integer; 8-byte values already
    wrapped to int64 in :func:`_be`."""
    if width < 8 and v >= np.int64(1) << (8 * width - 1):
        return v - (np.int64(1) << (8 * width))
    return v


@numba.njit(cache=True, nogil=True)
def walk(a, addr, start, file_size, topic, tlen, qid, qo):
    """Check every record; fill the per-record arrays of non-BLANK records. Returns (records
    including BLANKs, non-BLANK records), or (-1, -1) at the first unusual thing."""
    size = a.shape[0]
    p = 0
    n = 0
    m = 0
    while p < size:
        if size - p < 8:
            return -1, -1
        total = _signed(_be(a, p, 4), 4)
        if total < 8 or p + total > size:
            return -1, -1
        magic = _be(a, p + 4, 4)
        off = start + p
        end = p + total
        if magic == _BLANK:
            if (off + total) % file_size != 0:
                return -1, -1
            n += 1
            p = end
            continue
        if (magic != _V1 and magic != _V2) or total < 98:
            return -1, -1
        crc = _be(a, p + 8, 4)
        phys = _signed(_be(a, p + 28, 8), 8)
        if phys != off or off // file_size != (off + total - 1) // file_size:
            return -1, -1
        sysflag = _be(a, p + 36, 4)
        q = p + 48 + (20 if sysflag & _BORN6 else 8) + 8 + (20 if sysflag & _STORE6 else 8)
        q += 12
        if q + 4 > end:
            return -1, -1
        blen = _signed(_be(a, q, 4), 4)
        body = q + 4
        tl_at = body + blen
        if blen < 0 or tl_at + 2 > end:
            return -1, -1
        if magic == _V2:
            tl = _be(a, tl_at, 2)
            t0 = tl_at + 2
        else:
            tl = np.int64(a[tl_at])
            t0 = tl_at + 1
        props = t0 + tl
        if props + 2 > end or props + 2 + _be(a, props, 2) != end:
            return -1, -1
        if (_CRC32(0, addr + body, blen) & 0x7FFFFFFF) != crc:
            return -1, -1
        if not _prop_crc_ok(a, addr, p, end):
            return -1, -1
        if m >= topic.shape[0]:
            return -1, -1
        topic[m] = t0
        tlen[m] = tl
        qid[m] = _signed(_be(a, p + 12, 4), 4)
        qo[m] = _signed(_be(a, p + 20, 8), 8)
        m += 1
        n += 1
        p = end
    return n, m


@numba.njit(cache=True, nogil=True)
def _prop_crc_ok(a, addr, p, end):
    """``prop_crc.carried_crc_ok`` is not False for the record ``a[p:end]`` (at least 98
    bytes): it carries no CRC property and does not end with three zero bytes, or its
    property is whole and its ten digits (least significant first) are the CRC of every byte
    before the property. False sends the chunk to the paths that name the record."""
    k = end - _CRC_LEN
    for j in range(_KEY.shape[0]):
        if a[k + j] != _KEY[j]:
            return not (a[end - 1] == 0 and a[end - 2] == 0 and a[end - 3] == 0)
    if a[k - 1] != 2 and not (a[k - 2] == 0 and a[k - 1] == _CRC_LEN):
        return True  # inside another property's value: not a property of its own
    if a[end - 1] != 2:
        return False
    want = np.int64(0)
    scale = np.int64(1)
    for j in range(10):
        d = np.int64(a[k + _KEY.shape[0] + j]) - 48
        if d < 0 or d > 9:
            return False
        want += d * scale
        scale *= 10
    return np.int64(_CRC32(0, addr + p, end - p - _CRC_LEN) & 0x7FFFFFFF) == want


@numba.njit(cache=True, nogil=True)
def queues(a, topic, tlen, qid, qo):
    """Per (topic, queueId) in record order: queue offsets must go up by one. Returns
    (representative record, first, last) arrays per queue, or empty arrays when a queue
    skips or two topic names collide in the hash (the caller falls back)."""
    m = topic.shape[0]
    slot_of = dict()
    rep = np.empty(m, np.int64)
    first = np.empty(m, np.int64)
    last = np.empty(m, np.int64)
    k = 0
    none = np.empty(0, np.int64)
    for i in range(m):
        h = np.uint64(14695981039346656037)  # FNV-1a over the topic bytes, then the length
        t0 = topic[i]
        for j in range(tlen[i]):
            h = (h ^ np.uint64(a[t0 + j])) * np.uint64(1099511628211)
        h = (h ^ np.uint64(tlen[i])) * np.uint64(1099511628211)
        key = np.int64(h ^ (np.uint64(qid[i] & 0xFFFFFFFF) * np.uint64(0x9E3779B97F4A7C15)))
        if key not in slot_of:
            slot_of[key] = k
            rep[k] = i
            first[k] = qo[i]
            last[k] = qo[i]
            k += 1
            continue
        s = slot_of[key]
        r = rep[s]
        if tlen[r] != tlen[i] or qid[r] != qid[i]:
            return none, none, none
        for j in range(tlen[i]):
            if a[topic[r] + j] != a[t0 + j]:
                return none, none, none
        if qo[i] != last[s] + 1:
            return none, none, none
        last[s] = qo[i]
    return rep[:k], first[:k], last[:k]


@numba.njit(cache=True, nogil=True)
def crc32_at(addr, length):
    """The walk's body CRC of ``length`` bytes at ``addr`` (for the parity tests)."""
    return _CRC32(0, addr, length)


@numba.njit(cache=True, nogil=True)
def messages(a, start, out, tables):
    """The delivery check's fields of every non-BLANK record of a chunk the walk found sound:
    ``out`` rows (log offset, store time, topic id, UNIQ_KEY position, its length or -1, host
    id, key hash) and ``tables`` rows (position, length) of each distinct topic then host, ids
    in order of first appearance. Returns (messages, topics, hosts), or -1s when anything is
    unusual or a table is full (the caller falls back to the Python walk)."""
    size = a.shape[0]
    p, m, nt, nh = 0, 0, 0, 0
    half = tables.shape[0] // 2
    while p < size:
        if size - p < 8:
            return -1, -1, -1
        total = _signed(_be(a, p, 4), 4)
        if total < 8 or p + total > size:
            return -1, -1, -1
        end = p + total
        if _be(a, p + 4, 4) == _BLANK:
            p = end
            continue
        if total < 98 or m >= out.shape[0]:
            return -1, -1, -1
        sysflag = _be(a, p + 36, 4)
        at_pos = p + 48 + (20 if sysflag & _BORN6 else 8)
        host = at_pos + 8
        hlen = 20 if sysflag & _STORE6 else 8
        q = host + hlen + 12
        blen = _signed(_be(a, q, 4), 4)
        tl_at = q + 4 + blen
        if blen < 0 or tl_at + 2 > end:
            return -1, -1, -1
        if _be(a, p + 4, 4) == _V2:
            tl = _be(a, tl_at, 2)
            t0 = tl_at + 2
        else:
            tl = np.int64(a[tl_at])
            t0 = tl_at + 1
        props = t0 + tl + 2
        if props > end:
            return -1, -1, -1
        tid = _table_id(a, tables, 0, nt, t0, tl)
        if tid == nt:
            if nt >= half:
                return -1, -1, -1
            nt += 1
        hid = _table_id(a, tables, half, nh, host, hlen)
        if hid == nh:
            if nh >= half:
                return -1, -1, -1
            nh += 1
        u0, ul = _uniq_key(a, props, end)
        h = np.uint64(14695981039346656037)
        if ul >= 0:
            h = _fnv(a, t0, tl, h)
            h = (h ^ np.uint64(0x100)) * np.uint64(1099511628211)
            h = _fnv(a, u0, ul, h)
        out[m, 0] = start + p
        out[m, 1] = _signed(_be(a, at_pos, 8), 8)
        out[m, 2] = tid
        out[m, 3] = u0
        out[m, 4] = ul
        out[m, 5] = hid
        out[m, 6] = np.int64(h)
        m += 1
        p = end
    return m, nt, nh


@numba.njit(cache=True, nogil=True)
def _fnv(a, p, n, h):
    """FNV-1a 64 of ``n`` bytes at ``a[p]``, continuing from ``h``."""
    for j in range(n):
        h = (h ^ np.uint64(a[p + j])) * np.uint64(1099511628211)
    return h


@numba.njit(cache=True, nogil=True)
def _table_id(a, tables, base, n, p, length):
    """The id of the bytes ``a[p:p+length]`` among the ``n`` table rows from ``base`` (the
    newest first: records come in runs), adding them as row ``n`` when new."""
    for k in range(n - 1, -1, -1):
        r0, rl = tables[base + k, 0], tables[base + k, 1]
        if rl == length:
            same = True
            for j in range(length):
                if a[r0 + j] != a[p + j]:
                    same = False
                    break
            if same:
                return k
    tables[base + n, 0] = p
    tables[base + n, 1] = length
    return n


@numba.njit(cache=True, nogil=True)
def _uniq_key(a, p, end):
    """(position, length) of the UNIQ_KEY value in the properties ``a[p:end]``
    (``name\\x01value\\x02`` items; the last one named UNIQ_KEY wins), or (-1, -1)."""
    u0, ul = -1, -1
    i = p
    while i < end:
        j = i
        while j < end and a[j] != 2:
            j += 1
        if j - i >= 9 and a[i + 8] == 1 and a[i] == 85 and a[i + 1] == 78 and a[i + 2] == 73:
            if a[i + 3] == 81 and a[i + 4] == 95 and a[i + 5] == 75 and a[i + 6] == 69:
                if a[i + 7] == 89:
                    u0, ul = i + 9, j - i - 9
        i = j + 1
    return u0, ul
