"""The walk of records valid in place, record by record (the store's recovery, its file scan
and repair); see :mod:`contracts.record_walk`.

A record is valid in place when it decodes, says it is at its own physical offset and (with
``check_crc``, RocketMQ's checkCRCOnRecover) passes its body CRC; a BLANK must end exactly at
its file end. Zero bytes where a record would start are the end of the written data (reason
``""``); anything else that stops the walk is named (the decoder's reason or the check's).
"""

from __future__ import annotations

from collections.abc import Callable

from contracts.errors import CorruptRecordError
from contracts.record.model import Record
from contracts.record.reader import decode_record


def valid_step(
    buf, pos: int, *, base_offset: int, limit: int, check_crc: bool = True, source: str = ""
) -> tuple[Record | None, str]:
    """The record at ``buf[pos:]`` (log offset ``base_offset + pos``, its file ending at
    ``limit``) when it is valid in place, with ``""``; else ``None`` and why (``""``: zero
    bytes, the end of the written data)."""
    if pos + 4 <= limit and int.from_bytes(buf[pos : pos + 4], "big") == 0:
        return None, ""
    try:
        rec = decode_record(buf, pos, base_offset=base_offset, limit=limit, source=source)
    except CorruptRecordError as exc:
        return None, exc.reason
    if rec.is_blank:
        if pos + rec.total_size != limit:
            return None, f"BLANK record at {rec.physical_offset} not at the file end"
    elif rec.stored_physical_offset != rec.physical_offset:
        return None, f"record at {rec.physical_offset} says it is at {rec.stored_physical_offset}"
    elif check_crc and not rec.crc_ok:
        return None, f"body CRC mismatch at {rec.physical_offset}"
    return rec, ""


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
    """Walk one file's valid records from ``pos``; returns (where the walk stopped, why,
    whether the file is closed: a BLANK at its end or records up to its last byte).
    ``on_record`` sees every valid message record (not the BLANK)."""
    while pos + 4 <= limit:
        rec, reason = valid_step(
            buf, pos, base_offset=base_offset, limit=limit, check_crc=check_crc, source=source
        )
        if rec is None:
            return pos, reason, False
        if rec.is_blank:
            return limit, "", True
        if on_record is not None:
            on_record(rec)
        pos += rec.total_size
    return pos, "", pos == limit
