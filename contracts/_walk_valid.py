"""The one walk of records valid in place (see :mod:`contracts.record_walk`): the store's
recovery, its file scan and repair, and the archive shipper's scans (a store directory's and a
live node's) all chain records with :func:`walk_in_place`; what each extracts per record is its
``decode`` parameter (the full decoder, the shipper's light scan, or nothing: frames only).

A record is valid in place when its frame is plain (TOTALSIZE and MAGIC in range, wholly inside
the walked range) and it decodes; with ``check_offset`` it says it is at its own physical offset,
with ``file_end`` a BLANK ends exactly there, with ``check_crc`` (RocketMQ's checkCRCOnRecover)
its body CRC holds. Zero bytes where a record would start are the end of the written data;
anything else that stops the walk is a :class:`CorruptRecordError` naming why (the decoder's
reason or the check's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contracts.errors import CorruptRecordError
from contracts.record.layout import (
    I64,
    MAGIC_BLANK,
    MAGICS,
    OFFSET_PHYSICALOFFSET,
    PREFIX,
    encoded_length,
)
from contracts.record.model import Record
from contracts.record.prop_crc import PROPERTY_CRC32, carried_crc_ok
from contracts.record.reader import decode_record

_MIN_RECORD = encoded_length(0, 0, 0)
#: a per-record decoder: ``decode(view, pos, base_offset, limit, source)`` -> what the walker
#: keeps of the record (it has ``crc_ok`` when ``check_crc`` is asked); raises
#: :class:`CorruptRecordError` for a record that does not decode
Decode = Callable[[Any, int, int, int, str], Any]
Stop = str | CorruptRecordError


def _full(view, pos: int, base_offset: int, limit: int, source: str) -> Record:
    return decode_record(view, pos, base_offset=base_offset, limit=limit, source=source)


def _named(view, pos: int, base_offset: int, limit: int, source: str) -> CorruptRecordError:
    """Why the frame at ``pos`` is not a plain record, in the decoder's words."""
    try:
        decode_record(view, pos, base_offset=base_offset, limit=limit, source=source)
    except CorruptRecordError as exc:
        return exc
    return CorruptRecordError(source, base_offset + pos, "bad frame")


def walk_in_place(
    view,
    pos: int,
    *,
    base_offset: int,
    limit: int,
    decode: Decode | None = None,
    on_record: Callable[[Any], None] | None = None,
    file_end: int | None = None,
    check_offset: bool = False,
    check_crc: bool = False,
    budget: int | None = None,
    take_first: bool = True,
    partial_is_end: bool = False,
    source: str = "",
) -> tuple[int, int, int, Stop]:
    """Chain records from ``view[pos:limit]`` (log offset ``base_offset + pos``).

    Returns (end, records taken (a BLANK included), start of the last message or -1, why it
    stopped): ``"end"`` at ``limit`` or zero bytes (with ``partial_is_end`` also before a plain
    record not wholly inside ``limit`` yet: a live log's written end), ``"blank"`` after a
    BLANK (the file is closed), ``"budget"`` before a record past ``budget`` bytes (the first
    one is taken regardless when ``take_first``), or a :class:`CorruptRecordError` at ``end``
    (the records before it are good). ``on_record`` sees ``decode``'s result for every taken
    message (not the BLANK).
    """
    if on_record is not None and decode is None:
        raise ValueError("on_record sees what decode extracts: pass a decode")
    unpack = PREFIX.unpack_from
    blank, magics, least, view_len = MAGIC_BLANK, MAGICS, _MIN_RECORD, len(view)
    stop = pos + budget if budget is not None else limit
    inspect = decode is not None or check_offset
    n, last = 0, -1
    while pos + 8 <= limit:
        total, magic = unpack(view, pos)
        end = pos + total
        if magic in magics and least <= total and end <= limit:  # a plain message frame
            if end > stop and (n or not take_first):
                return pos, n, last, "budget"
            if inspect:
                why = _inspect(
                    view,
                    pos,
                    base_offset,
                    limit,
                    decode,
                    on_record,
                    check_offset,
                    check_crc,
                    source,
                )
                if why is not None:
                    return pos, n, last, why
            n, last, pos = n + 1, pos, end
            continue
        if total == 0:  # zero bytes: the end of the written data
            return pos, n, last, "end"
        ok = 8 <= total if magic == blank else (magic in magics and least <= total)
        if not ok or end > limit:
            if ok and partial_is_end and end <= view_len:
                break  # not wholly written yet: a slave's log grows by HA frames
            return pos, n, last, _named(view, pos, base_offset, limit, source)
        if end > stop and (n or not take_first):
            return pos, n, last, "budget"
        if file_end is not None and end != file_end:
            why = f"BLANK record at {base_offset + pos} not at the file end"
            return pos, n, last, CorruptRecordError(source, base_offset + pos, why)
        return end, n + 1, last, "blank"
    if pos + 4 <= limit and not partial_is_end and view[pos : pos + 4] != b"\0\0\0\0":
        # a TOTALSIZE but no room for a MAGICCODE before the limit
        return pos, n, last, _named(view, pos, base_offset, limit, source)
    return pos, n, last, "end"


def _inspect(view, pos, base_offset, limit, decode, on_record, check_offset, check_crc, source):
    """The checks past the frame (decodes; at its own offset; its CRC), then ``on_record``;
    None when the record is valid in place, else why not."""
    rec = None
    if decode is not None:
        try:
            rec = decode(view, pos, base_offset, limit, source)
        except CorruptRecordError as exc:
            return exc
    if check_offset:
        (stored,) = I64.unpack_from(view, pos + OFFSET_PHYSICALOFFSET)
        if stored != base_offset + pos:
            why = f"record at {base_offset + pos} says it is at {stored}"
            return CorruptRecordError(source, base_offset + pos, why)
    if check_crc and not rec.crc_ok:
        why = f"body CRC mismatch at {base_offset + pos}"
        return CorruptRecordError(source, base_offset + pos, why)
    if check_crc and not rec.is_blank and carried_crc_ok(view, pos, rec.total_size) is False:
        why = f"record CRC (property {PROPERTY_CRC32}) mismatch at {base_offset + pos}"
        return CorruptRecordError(source, base_offset + pos, why)
    if on_record is not None:
        on_record(rec)
    return None


def walk_valid(
    buf,
    pos: int,
    *,
    base_offset: int,
    limit: int,
    check_crc: bool = True,
    on_record: Callable[[Record], None] | None = None,
    source: str = "",
) -> tuple[int, str, bool]:
    """The store's walk of one file (``limit`` is its end) from ``pos``, fully decoding: returns
    (where the walk stopped, why (``""``: the end of the written data), whether the file is
    closed: a BLANK at its end or records up to its last byte)."""
    end, _n, _last, why = walk_in_place(
        buf,
        pos,
        base_offset=base_offset,
        limit=limit,
        decode=_full,
        on_record=on_record,
        file_end=limit,
        check_offset=True,
        check_crc=check_crc,
        source=source,
    )
    if why == "blank":
        return end, "", True
    if isinstance(why, CorruptRecordError):
        return end, why.reason, False
    return end, "", end == limit


def valid_step(
    buf, pos: int, *, base_offset: int, limit: int, check_crc: bool = True, source: str = ""
) -> tuple[Record | None, str]:
    """The record at ``buf[pos:]`` (its file ending at ``limit``) when it is valid in place (the
    same walk, one record long), with ``""``; else ``None`` and why (``""``: zero bytes)."""
    got: list[Record] = []
    _end, n, _last, why = walk_in_place(
        buf,
        pos,
        base_offset=base_offset,
        limit=limit,
        decode=_full,
        on_record=got.append,
        file_end=limit,
        check_offset=True,
        check_crc=check_crc,
        budget=0,
        source=source,
    )
    if isinstance(why, CorruptRecordError):
        return None, why.reason
    if not n:
        return None, ""
    return (got[0] if got else _full(buf, pos, base_offset, limit, source)), ""
