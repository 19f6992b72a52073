"""The record walk in pure Python: a fast pass that reads only what the checks need, and the
full decoder (:func:`check_slow`) that names every issue; see :mod:`contracts.record_walk`."""

from __future__ import annotations

import zlib

from contracts.errors import CorruptRecordError
from contracts.record.layout import (
    HEAD,
    I32,
    I64,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    PREFIX,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    body_crc,
)
from contracts.record.prop_crc import (
    CRC32_RESERVED_LEN,
    PROPERTY_CRC32,
    carried_crc_ok,
    record_crc,
)
from contracts.record.reader import decode_record

_HEAD = HEAD  # TOTALSIZE .. BORNTIMESTAMP, one unpack per record
_I32 = I32
_I64 = I64
_V1, _V2, _BLANK = MAGIC_V1, MAGIC_V2, MAGIC_BLANK
_BORN6, _STORE6 = SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
_CRC_KEY, _CRC_LEN = PROPERTY_CRC32.encode() + b"\x01", CRC32_RESERVED_LEN


def check_chunk_py(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    """Walk one chunk's records; returns (issues, {(topic, qid): [first, last]}, records).

    The fast path reads only what the checks need (one header unpack, the body CRC over a
    memoryview, the topic bytes); anything unusual is decoded in full by ``check_slow``.
    """
    view = memoryview(data)
    size = len(data)
    queues: dict = {}
    head = _HEAD.unpack_from
    i32 = _I32.unpack_from
    crc32 = zlib.crc32
    starts, ends = data.startswith, data.endswith
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
            if (starts(_CRC_KEY, end - _CRC_LEN) or ends(b"\0\0\0", 0, end)) and (
                carried_crc_ok(view, pos, total) is False
            ):
                break  # the record CRC property (prop_crc.py) fails: the decoder names it
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
    return check_slow(data, start, file_size, node)


def _issue(off, check, detail, rec=None, expected=None, found=None) -> tuple:
    """An issue tuple: (offset, check, detail, topic, queueId, queueOffset, msgId, expected,
    found); the record's fields when it could be decoded."""
    if rec is None or rec.is_blank:
        return (off, check, detail, None, None, None, None, expected, found)
    return (
        off,
        check,
        detail,
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        rec.msg_id,
        expected,
        found,
    )


def check_slow(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    """Decode every record of the chunk and name every issue (the slow path of the walks)."""
    issues: list[tuple] = []
    queues: dict[tuple[str, int], list[int]] = {}
    pos = 0
    n = 0
    size = len(data)
    while pos < size:
        off = start + pos
        try:
            rec = decode_record(data, pos, base_offset=start, source=node)
        except CorruptRecordError as exc:
            issues.append(_issue(off, "record_malformed", exc.reason, None, "a record", "garbage"))
            return issues, queues, n
        n += 1
        if rec.is_blank:
            if rec.end % file_size:
                issues.append(
                    _issue(
                        off,
                        "blank_not_at_file_end",
                        f"BLANK ends at {rec.end}",
                        None,
                        f"end at a multiple of {file_size}",
                        str(rec.end),
                    )
                )
        else:
            issues += _record_issues(rec, off, file_size)
            # the record CRC covers the body too: a body CRC mismatch is one finding, not two
            if rec.crc_ok and carried_crc_ok(data, pos, rec.total_size) is False:
                issues.append(_prop_crc_issue(data, pos, off, rec))
            _queue_issues(rec, off, queues, issues)
        pos += rec.total_size
    return issues, queues, n


def _record_issues(rec, off: int, file_size: int) -> list[tuple]:
    """A message record's own issues: where it says it is, a file end crossed, its CRC."""
    issues = []
    if rec.stored_physical_offset != off:
        issues.append(
            _issue(
                off,
                "physical_offset_mismatch",
                f"record says {rec.stored_physical_offset}",
                rec,
                str(off),
                str(rec.stored_physical_offset),
            )
        )
    if off // file_size != (rec.end - 1) // file_size:
        issues.append(
            _issue(
                off,
                "crosses_file_end",
                f"ends at {rec.end}",
                rec,
                f"end by {(off // file_size + 1) * file_size}",
                str(rec.end),
            )
        )
    if not rec.crc_ok:
        got = body_crc(rec.body)
        issues.append(
            _issue(
                off,
                "crc_mismatch",
                f"bodyCRC {rec.body_crc} != {got} (queueOffset {rec.queue_offset}, "
                f"msgId {rec.msg_id})",
                rec,
                str(rec.body_crc),
                str(got),
            )
        )
    return issues


def _prop_crc_issue(data: bytes, pos: int, off: int, rec) -> tuple:
    """The record's CRC property (``__CRC32#``, over all its bytes but the property) fails: a
    byte of its header, topic or properties changed (or it was torn), which the body CRC
    does not cover."""
    end = pos + rec.total_size
    tail = bytes(data[end - CRC32_RESERVED_LEN : end])
    got = str(record_crc(memoryview(data)[pos:end]))
    value = tail[len(_CRC_KEY) :]
    if tail.startswith(_CRC_KEY) and value[-1:] == b"\x02" and value[:-1].isdigit():
        want = value[:-1][::-1].decode("ascii")  # its digits, least significant first
        said = f"record CRC ({PROPERTY_CRC32}) {want} != {got}"
    elif tail.startswith(_CRC_KEY):  # the key in place, its value not ten digits and \x02
        want, got = (
            "ten digits and \\x02",
            value.decode("latin-1").encode("unicode_escape").decode("ascii"),
        )
        said = f"record CRC ({PROPERTY_CRC32}) value torn: {got}"
    else:  # no writer ends a record so (prop_crc.py)
        want, got, said = "a whole record", "3 zero bytes at its end", "torn: ends with zeros"
    where = f" (queueOffset {rec.queue_offset}, msgId {rec.msg_id})"
    return _issue(off, "record_crc_mismatch", said + where, rec, want, got)


def _queue_issues(rec, off: int, queues: dict, issues: list) -> None:
    """Track the record's (topic, queueId) range in ``queues``; a gap is an issue."""
    key = (rec.topic, rec.queue_id)
    q = queues.get(key)
    if q is None:
        queues[key] = [rec.queue_offset, rec.queue_offset]
        return
    if rec.queue_offset != q[1] + 1:
        issues.append(
            _issue(
                off,
                "queue_offset_gap",
                f"topic {rec.topic} queue {rec.queue_id}: expected queue offset "
                f"{q[1] + 1}, found {rec.queue_offset}",
                rec,
                str(q[1] + 1),
                str(rec.queue_offset),
            )
        )
    q[1] = rec.queue_offset


_UNIQ = b"UNIQ_KEY\x01"
_FNV_OFFSET, _FNV_PRIME, _M64 = 14695981039346656037, 1099511628211, (1 << 64) - 1


def key_hash(topic: bytes, uniq: bytes | None) -> int:
    """The delivery check's 64-bit key hash (signed): FNV-1a over the topic, 0x100, the
    UNIQ_KEY; the bare offset basis for a record without one (the compiled walk's ``_fnv``)."""
    h = _FNV_OFFSET
    if uniq is not None:
        for b in (*topic, 0x100, *uniq):
            h = ((h ^ b) * _FNV_PRIME) & _M64
    return h - (1 << 64) if h >= 1 << 63 else h


def uniq_span(data: bytes, p: int, end: int) -> tuple[int, int]:
    """(position, length) of the UNIQ_KEY value in the properties ``data[p:end]`` (the last
    item named UNIQ_KEY wins, as ``string_to_properties``), or (-1, -1)."""
    u0 = ul = -1
    i = p
    while i < end:
        j = data.find(b"\x02", i, end)
        j = end if j < 0 else j
        if data.startswith(_UNIQ, i, j):
            u0, ul = i + 9, j - i - 9
        i = j + 1
    return u0, ul


def message_fields_py(data: bytes, start: int) -> tuple[list, list, list] | None:
    """What the compiled ``messages`` kernel gives, in Python, for a chunk the walk found
    sound: rows (log offset, store time, topic id, UNIQ_KEY position, its length or -1, host
    id, key hash), and the (position, length) of each distinct topic and host."""
    rows, topics, hosts = [], {}, {}
    i64, size, pos = _I64.unpack_from, len(data), 0
    while pos < size:
        total, magic = PREFIX.unpack_from(data, pos)
        end = pos + total
        if total < 8 or end > size:
            return None
        if magic == _BLANK:
            pos = end
            continue
        (sysflag,) = _I32.unpack_from(data, pos + 36)
        at_pos = pos + 48 + (20 if sysflag & _BORN6 else 8)
        host = data[at_pos + 8 : at_pos + 8 + (20 if sysflag & _STORE6 else 8)]
        q = at_pos + 8 + len(host) + 12
        tl_at = q + 4 + _I32.unpack_from(data, q)[0]
        width = 1 if magic == _V1 else 2
        tl = int.from_bytes(data[tl_at : tl_at + width], "big")
        topic = data[tl_at + width : tl_at + width + tl]
        u0, ul = uniq_span(data, tl_at + width + tl + 2, end)
        tid = topics.setdefault(topic, (len(topics), tl_at + width))[0]
        hid = hosts.setdefault(host, (len(hosts), at_pos + 8))[0]
        h = key_hash(topic, data[u0 : u0 + ul] if ul >= 0 else None)
        rows.append((start + pos, i64(data, at_pos)[0], tid, u0, ul, hid, h))
        pos = end
    return (
        rows,
        [(p, len(t)) for t, (_i, p) in topics.items()],
        [(p, len(h)) for h, (_i, p) in hosts.items()],
    )
