"""The archive shipper's record walks over commit log bytes (see :mod:`contracts.record_walk`):
a walk that checks each record's framing and body CRC (store directories) and a chain by
TOTALSIZE and MAGIC alone (a live node's own, trusted bytes). Anything unusual goes to
:func:`contracts.record.reader.decode_record`, which names the fault."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from contracts.errors import CorruptRecordError
from contracts.record.layout import (
    HEAD,
    I16,
    I32,
    I64,
    MAGIC_BLANK,
    MAGIC_V2,
    MAGICS,
    OFFSET_BORNHOST,
    OFFSET_SYSFLAG,
    PREFIX,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    encoded_length,
)
from contracts.record.reader import decode_record

# The record layout is contracts.record.layout's: its fixed head (TOTALSIZE .. BORNTIMESTAMP) and the
# single-field structs; the scans below only read what the shipper needs.
_HEAD = HEAD
_I64, _I32, _I16 = I64, I32, I16
_MIN_RECORD = encoded_length(0, 0, 0)


@dataclass(slots=True)
class ScannedRecord:
    """What the shipper keeps of a record (no body or properties copy)."""

    physical_offset: int
    total_size: int
    is_blank: bool
    crc_ok: bool = True
    topic: str = ""
    queue_id: int = 0
    queue_offset: int = 0
    store_timestamp: int = 0

    @property
    def end(self) -> int:
        return self.physical_offset + self.total_size


def walk_records(view, base: int, start: int, limit: int, source: str):
    """Records from ``view[start:limit]`` with the framing checks of ``decode_record`` (size
    chaining, magic, body/topic/properties lengths ending exactly at the record end) but no
    host, body or properties decoding; anything unusual is left to ``decode_record``, which
    raises the precise :class:`CorruptRecordError`. Stops at a zero TOTALSIZE or after a BLANK.
    """
    topics: dict[bytes, str] = {}
    pos = start
    while pos < limit:
        if limit - pos >= 4 and _I32.unpack_from(view, pos)[0] == 0:
            return
        rec = None
        if limit - pos >= _HEAD.size + 40:
            total, magic, crc, queue_id, _flag, queue_offset, _phys, sysflag, _born = (
                _HEAD.unpack_from(view, pos)
            )
            rec_end = pos + total
            if magic == MAGIC_BLANK and 8 <= total and rec_end <= limit:
                rec = ScannedRecord(base + pos, total, True)
            elif magic in MAGICS and _MIN_RECORD <= total and rec_end <= limit:
                p = pos + _HEAD.size + (20 if sysflag & SYSFLAG_BORNHOST_V6 else 8)
                (store_ts,) = _I64.unpack_from(view, p)
                p += 8 + (20 if sysflag & SYSFLAG_STOREHOST_V6 else 8) + 12
                (body_len,) = _I32.unpack_from(view, p)
                p += 4
                body_at = p
                p += body_len
                if 0 <= body_len and p + 3 <= rec_end:
                    if magic == MAGIC_V2:
                        (topic_len,) = _I16.unpack_from(view, p)
                        p += 2
                    else:
                        topic_len = view[p]
                        p += 1
                    t_end = p + topic_len
                    if 0 <= topic_len and t_end + 2 <= rec_end:
                        (props_len,) = _I16.unpack_from(view, t_end)
                        raw = bytes(view[p:t_end])
                        topic = topics.get(raw)
                        if topic is None:
                            try:
                                topic = topics[raw] = raw.decode("utf-8")
                            except UnicodeDecodeError:
                                topic = None
                        if topic is not None and t_end + 2 + props_len == rec_end:
                            ok = zlib.crc32(view[body_at : body_at + body_len]) & 0x7FFFFFFF
                            rec = ScannedRecord(
                                base + pos,
                                total,
                                False,
                                ok == crc,
                                topic,
                                queue_id,
                                queue_offset,
                                store_ts,
                            )
        if rec is None:  # not plainly well-formed: the full decoder decides (and names why)
            full = decode_record(
                view, pos, base_offset=base, limit=limit, source=source, with_body=True
            )
            rec = ScannedRecord(
                full.physical_offset,
                full.total_size,
                full.is_blank,
                full.is_blank or full.crc_ok,
                full.topic,
                full.queue_id,
                full.queue_offset,
                full.store_timestamp,
            )
        yield rec
        if rec.is_blank:
            return
        pos += rec.total_size


_PREFIX = PREFIX  # TOTALSIZE | MAGICCODE
_SYSFLAG_AT = OFFSET_SYSFLAG
_BORNHOST_AT = OFFSET_BORNHOST


def store_timestamp(view, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (it follows the 8- or 20-byte BORNHOST)."""
    (sysflag,) = _I32.unpack_from(view, pos + _SYSFLAG_AT)
    return _I64.unpack_from(
        view, pos + _BORNHOST_AT + (20 if sysflag & SYSFLAG_BORNHOST_V6 else 8)
    )[0]


def scan_frames(view, base: int, pos: int, limit: int, budget: int, take_first: bool, source: str):
    """Chain records from ``view[pos:]`` (log offset ``base + pos``) by TOTALSIZE and MAGIC while they fit in ``budget`` bytes
    (the first one regardless when ``take_first``).

    Returns (end, frames, start of the last message or -1, why it stopped): ``"blank"`` after a
    BLANK (the file is closed), ``"budget"`` before a record that does not fit, ``"end"`` at
    ``limit``, a zero TOTALSIZE or a well-framed record running past ``limit`` (the written
    end), or the decoder's precise
    :class:`CorruptRecordError` for a frame that is not a plain record (bad magic, size out of
    range); the frames before it are good.
    """
    unpack = _PREFIX.unpack_from
    blank, magics, least = MAGIC_BLANK, MAGICS, _MIN_RECORD
    stop = pos + budget
    n, last = 0, -1
    while pos + 8 <= limit:
        total, magic = unpack(view, pos)
        if total == 0:
            break
        end = pos + total
        ok = 8 <= total if magic == blank else (magic in magics and least <= total)
        if ok and limit < end <= len(view):
            break  # a record (or BLANK) not wholly flushed yet: a slave's log grows by HA
            # frames that split records; the written end for now, it ships once complete
        if not ok or end > limit:
            try:
                decode_record(view, pos, base_offset=base, limit=limit, source=source)
            except CorruptRecordError as exc:
                return pos, n, last, exc
            return pos, n, last, CorruptRecordError(f"{source}: bad frame at {base + pos}")
        if end > stop and (n or not take_first):
            return pos, n, last, "budget"
        if magic == blank:
            return end, n + 1, last, "blank"
        n, last, pos = n + 1, pos, end
    return pos, n, last, "end"
