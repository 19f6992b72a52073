"""What the archive shipper extracts per record while :func:`contracts._walk_valid.walk_in_place`
walks the log (see :mod:`contracts.record_walk`): :func:`record_scanner`'s light decoding (framing
and body CRC, no host or properties decoding; anything unusual goes to
:func:`contracts.record.reader.decode_record`, which names the fault), and
:func:`store_timestamp`, the one field the live shipper reads of a record it chained by frame."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from contracts.record.layout import (
    HEAD,
    I16,
    I32,
    I64,
    MAGIC_V2,
    MAGICS,
    OFFSET_BORNHOST,
    OFFSET_SYSFLAG,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
)
from contracts.record.reader import decode_record

# The record layout is contracts.record.layout's: its fixed head (TOTALSIZE .. BORNTIMESTAMP)
# and the single-field structs; the scan below only reads what the shipper needs.
_HEAD = HEAD
_I64, _I32, _I16 = I64, I32, I16


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


def record_scanner():
    """The archive shipper's light decoding for :func:`contracts._walk_valid.walk_in_place`:
    ``scan(view, pos, base, limit, source)`` -> :class:`ScannedRecord` with the framing checks
    of ``decode_record`` (body/topic/properties lengths ending exactly at the record end) and
    the body CRC, but no host, body or properties decoding; anything unusual is left to
    ``decode_record``, which raises the precise :class:`CorruptRecordError`. Topic names are
    decoded once per scanner."""
    topics: dict[bytes, str] = {}

    def scan(view, pos: int, base: int, limit: int, source: str) -> ScannedRecord:
        if limit - pos >= _HEAD.size + 40:
            total, magic, crc, queue_id, _flag, queue_offset, _phys, sysflag, _born = (
                _HEAD.unpack_from(view, pos)
            )
            rec_end = pos + total
            if magic in MAGICS and rec_end <= limit:
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
                            return ScannedRecord(
                                base + pos,
                                total,
                                False,
                                ok == crc,
                                topic,
                                queue_id,
                                queue_offset,
                                store_ts,
                            )
        # not plainly well-formed: the full decoder decides (and names why)
        full = decode_record(
            view, pos, base_offset=base, limit=limit, source=source, with_body=True
        )
        return ScannedRecord(
            full.physical_offset,
            full.total_size,
            full.is_blank,
            full.is_blank or full.crc_ok,
            full.topic,
            full.queue_id,
            full.queue_offset,
            full.store_timestamp,
        )

    return scan


_SYSFLAG_AT = OFFSET_SYSFLAG
_BORNHOST_AT = OFFSET_BORNHOST


def store_timestamp(view, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (it follows the 8- or 20-byte BORNHOST)."""
    (sysflag,) = _I32.unpack_from(view, pos + _SYSFLAG_AT)
    return _I64.unpack_from(
        view, pos + _BORNHOST_AT + (20 if sysflag & SYSFLAG_BORNHOST_V6 else 8)
    )[0]
