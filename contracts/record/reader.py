"""The record reader: :func:`decode_record` (one record, every malformation a
:class:`CorruptRecordError` naming where), :func:`scan_records` (back to back) and
:func:`record_to_json`. The builder is ``contracts/record/builder.py``."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from contracts.errors import CorruptRecordError
from contracts.record.layout import (
    HEAD,
    I16,
    I32,
    I64,
    MAGIC_BLANK,
    MAGIC_V2,
    MAGICS,
    PREFIX,
    STORE_TAIL,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    U8,
    decode_host,
    encoded_length,
)
from contracts.record.model import Record
from contracts.record.properties import string_to_properties

Buffer = bytes | bytearray | memoryview
_Bad = Callable[[str], CorruptRecordError]


def decode_record(
    buf: Buffer,
    pos: int = 0,
    *,
    base_offset: int = 0,
    limit: int | None = None,
    source: str = "<buffer>",
    with_body: bool = True,
) -> Record:
    """Decode the record at ``buf[pos:]``; its physical offset is ``base_offset + pos``.

    ``limit`` is where readable bytes end (default ``len(buf)``). Raises
    :class:`CorruptRecordError` naming ``source`` and the physical offset when the bytes are
    not a well-formed record. The body CRC is *not* checked here: see :attr:`Record.crc_ok`.
    """
    end_limit = len(buf) if limit is None else limit
    phys = base_offset + pos

    def bad(reason: str) -> CorruptRecordError:
        return CorruptRecordError(source, phys, reason)

    total, magic = _frame(buf, pos, end_limit, bad)
    if magic == MAGIC_BLANK:
        return Record(phys, total, magic)
    try:
        return _fields(buf, pos, total, magic, phys, bad, with_body)
    except CorruptRecordError:
        raise
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise bad(f"malformed record: {exc}") from exc


def _frame(buf: Buffer, pos: int, end_limit: int, bad: _Bad) -> tuple[int, int]:
    """(TOTALSIZE, MAGICCODE) of the record at ``pos`` once they fit the readable bytes."""
    if pos + 8 > end_limit:
        raise bad(f"only {end_limit - pos} bytes left, a record header needs 8")
    total, magic = PREFIX.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        if total < 8 or pos + total > end_limit:
            raise bad(f"BLANK record claims {total} bytes, {end_limit - pos} left")
        return total, magic
    if magic not in MAGICS:
        raise bad(f"bad magic code 0x{magic:08X}")
    if total <= 0 or pos + total > end_limit:
        raise bad(f"record size {total} runs past the end ({end_limit - pos} bytes left)")
    minimum = encoded_length(0, 0, 0)
    if total < minimum:
        raise bad(f"record size {total} is below the minimum {minimum}")
    return total, magic


def _fields(
    buf: Buffer, pos: int, total: int, magic: int, phys: int, bad: _Bad, with_body: bool
) -> Record:
    """Every field of a framed record: the fixed part, then the payload."""
    (_, _, crc, queue_id, flag, queue_offset, stored_phys, sysflag, born_ts) = HEAD.unpack_from(
        buf, pos
    )
    p = pos + HEAD.size
    born_v6 = bool(sysflag & SYSFLAG_BORNHOST_V6)
    born_host = decode_host(buf, p, born_v6)
    p += 20 if born_v6 else 8
    (store_ts,) = I64.unpack_from(buf, p)
    p += 8
    store_v6 = bool(sysflag & SYSFLAG_STOREHOST_V6)
    store_host = decode_host(buf, p, store_v6)
    p += 20 if store_v6 else 8
    reconsume, prepared = STORE_TAIL.unpack_from(buf, p)
    p += STORE_TAIL.size
    body, topic, props = _payload(buf, p, pos + total, magic, bad, with_body)
    return Record(
        physical_offset=phys,
        total_size=total,
        magic=magic,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        stored_physical_offset=stored_phys,
        sysflag=sysflag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        topic=topic,
        properties=props,
    )


def _payload(
    buf: Buffer, p: int, rec_end: int, magic: int, bad: _Bad, with_body: bool
) -> tuple[bytes, str, dict[str, str]]:
    """(body, topic, properties) from BODYLENGTH at ``p``; they must end at ``rec_end``."""
    (body_len,) = I32.unpack_from(buf, p)
    p += 4
    if body_len < 0 or p + body_len > rec_end:
        raise bad(f"body length {body_len} runs past the record end")
    body = bytes(buf[p : p + body_len]) if with_body else b""
    p += body_len
    if magic == MAGIC_V2:
        (topic_len,) = I16.unpack_from(buf, p)
        p += 2
    else:
        (topic_len,) = U8.unpack_from(buf, p)
        p += 1
    if topic_len < 0 or p + topic_len > rec_end:
        raise bad(f"topic length {topic_len} runs past the record end")
    topic = bytes(buf[p : p + topic_len]).decode("utf-8")
    p += topic_len
    (props_len,) = I16.unpack_from(buf, p)
    p += 2
    if props_len < 0 or p + props_len != rec_end:
        raise bad(
            f"properties length {props_len} does not end at the record end "
            f"({rec_end - p} bytes left)"
        )
    props = string_to_properties(bytes(buf[p : p + props_len]).decode("utf-8"))
    return body, topic, props


def scan_records(
    buf: Buffer,
    *,
    base_offset: int = 0,
    start: int = 0,
    limit: int | None = None,
    source: str = "<buffer>",
    with_body: bool = True,
) -> Iterator[Record]:
    """Decode records back to back from ``buf[start:]`` until ``limit``.

    Stops cleanly at the end of the data or at a zero TOTALSIZE (the unwritten part of a
    mapped file); raises :class:`CorruptRecordError` on anything else that is not a record.
    A BLANK record is yielded and then scanning stops (it ends its file).
    """
    end = len(buf) if limit is None else limit
    pos = start
    while pos < end:
        if end - pos >= 4 and I32.unpack_from(buf, pos)[0] == 0:
            return
        rec = decode_record(
            buf, pos, base_offset=base_offset, limit=end, source=source, with_body=with_body
        )
        yield rec
        if rec.is_blank:
            return
        pos += rec.total_size


def record_to_json(rec: Record) -> dict:
    """A JSON-friendly dict of a record, as ``haproof store dump`` prints it."""
    if rec.is_blank:
        return {
            "physicalOffset": rec.physical_offset,
            "size": rec.total_size,
            "magic": f"0x{rec.magic:08X}",
            "blank": True,
        }
    return {
        "physicalOffset": rec.physical_offset,
        "size": rec.total_size,
        "magic": f"0x{rec.magic:08X}",
        "topic": rec.topic,
        "queueId": rec.queue_id,
        "queueOffset": rec.queue_offset,
        "storedPhysicalOffset": rec.stored_physical_offset,
        "bodyCRC": rec.body_crc,
        "crcOk": rec.crc_ok,
        "flag": rec.flag,
        "sysFlag": rec.sysflag,
        "bornTimestamp": rec.born_timestamp,
        "bornHost": f"{rec.born_host[0]}:{rec.born_host[1]}",
        "storeTimestamp": rec.store_timestamp,
        "storeHost": f"{rec.store_host[0]}:{rec.store_host[1]}",
        "reconsumeTimes": rec.reconsume_times,
        "preparedTransactionOffset": rec.prepared_transaction_offset,
        "msgId": rec.msg_id,
        "bodyLength": len(rec.body),
        "properties": rec.properties,
    }
