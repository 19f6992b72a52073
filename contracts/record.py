"""RocketMQ commit log record format: the one owner of the on-disk layout.

Every part of haproof that reads or writes commit log bytes (the store, HA replication, the
archive shipper, the Spark audit jobs) goes through this module. Builder and reader are apart:
``encode_record`` builds bytes, ``decode_record`` / ``scan_records`` read them.

Record layout, all integers big-endian (RocketMQ ``CommitLog.calMsgLength``)::

    TOTALSIZE                  i32  whole record length, this field included
    MAGICCODE                  i32  0xDAA320A7 (v1, i8 topic length) or 0xDAA320AB (v2, i16)
    BODYCRC                    i32  zlib.crc32(body) & 0x7FFFFFFF
    QUEUEID                    i32
    FLAG                       i32  user flag
    QUEUEOFFSET                i64  logical offset inside (topic, queueId)
    PHYSICALOFFSET             i64  offset of this record in the commit log
    SYSFLAG                    i32  0x10: born host is IPv6, 0x20: store host is IPv6
    BORNTIMESTAMP              i64  ms
    BORNHOST                   4-byte IPv4 + i32 port, or 16-byte IPv6 + i32 port
    STORETIMESTAMP             i64  ms
    STOREHOST                  likewise
    RECONSUMETIMES             i32
    PREPAREDTRANSACTIONOFFSET  i64
    BODYLENGTH                 i32  then body
    TOPICLENGTH                i8 (v1) / i16 (v2)  then topic (UTF-8)
    PROPERTIESLENGTH           i16  then properties: ``key\\x01value\\x02`` repeated

A file that cannot hold the next record plus 8 bytes is closed by a BLANK record:
``[i32 remaining bytes][i32 0xCBD43194]`` and the record goes to the start of the next file.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from contracts.errors import CorruptRecordError

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
MAGIC_BLANK = 0xCBD43194
MAGICS = (MAGIC_V1, MAGIC_V2)

#: a file must keep room for this many bytes after a record: the BLANK header
END_FILE_MIN_BLANK_LENGTH = 8

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"

#: the fixed head every record (and a BLANK) starts with
PREFIX = struct.Struct(">iI")  # TOTALSIZE i32 | MAGICCODE u32

# The fixed part from BODYCRC up to and including SYSFLAG.
HEAD = struct.Struct(
    ">iI"  # TOTALSIZE, MAGICCODE
    "i"  # BODYCRC
    "i"  # QUEUEID
    "i"  # FLAG
    "q"  # QUEUEOFFSET
    "q"  # PHYSICALOFFSET
    "i"  # SYSFLAG
    "q"  # BORNTIMESTAMP
)
I32 = struct.Struct(">i")  # TOTALSIZE alone, BODYLENGTH, a port
I16 = struct.Struct(">h")  # v2 TOPICLENGTH, PROPERTIESLENGTH
_I16 = I16
_U8 = struct.Struct(">B")
I64 = struct.Struct(">q")  # BORNTIMESTAMP / STORETIMESTAMP alone
_I64 = I64
_STORE_TAIL = struct.Struct(">iq")  # RECONSUMETIMES i32 | PREPAREDTRANSACTIONOFFSET i64
_ZERO8 = bytes(8)

# offsets of fields every reader may patch or peek at
OFFSET_QUEUEOFFSET = 20
OFFSET_PHYSICALOFFSET = 28
OFFSET_SYSFLAG = 36
OFFSET_BORNTIMESTAMP = 40
OFFSET_BORNHOST = 48

MAX_TOPIC_LENGTH_V1 = 127
MAX_TOPIC_LENGTH_V2 = 32767
MAX_PROPERTIES_LENGTH = 32767


def body_crc(body: bytes) -> int:
    """RocketMQ's body CRC: CRC-32 masked to a non-negative Java int."""
    return zlib.crc32(body) & 0x7FFFFFFF


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` (over UTF-16 code units) as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)
def tags_hash_code(tags: str | None) -> int:
    """Tag code stored in a consume queue entry: 0 without tags, else ``String.hashCode``."""
    if not tags:
        return 0
    return java_string_hash(tags)


def properties_to_string(props: dict[str, str]) -> str:
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def string_to_properties(s: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in s.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        k, sep, v = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            props[k] = v
    return props


def _host_len(sysflag: int, v6_flag: int) -> int:
    return 20 if sysflag & v6_flag else 8


@functools.lru_cache(maxsize=4096)
def encode_host(host: str, port: int) -> tuple[bytes, bool]:
    """4-byte IPv4 (or 16-byte IPv6) + i32 port; returns (bytes, is_v6)."""
    ip = ipaddress.ip_address(host)
    return ip.packed + I32.pack(port), ip.version == 6


def decode_host(buf: bytes | memoryview, pos: int, v6: bool) -> tuple[str, int]:
    n = 16 if v6 else 4
    ip = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, bytes(buf[pos : pos + n]))
    (port,) = I32.unpack_from(buf, pos + n)
    return ip, port


def message_id(store_host: str, store_port: int, physical_offset: int) -> str:
    """RocketMQ's offset msgId: store host address + port + physical offset, upper-case hex."""
    packed, _ = encode_host(store_host, store_port)
    return (packed + _I64.pack(physical_offset)).hex().upper()


@functools.lru_cache(maxsize=64)
def message_id_prefix(store_host: str, store_port: int) -> str:
    """The host part of :func:`message_id`: ``prefix + f"{offset:016X}"`` is the whole id."""
    packed, _ = encode_host(store_host, store_port)
    return packed.hex().upper()


def parse_message_id(msg_id: str) -> tuple[str, int, int]:
    """Inverse of :func:`message_id`: (host, port, physical offset)."""
    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"msgId {msg_id!r} is neither 16 (IPv4) nor 28 (IPv6) bytes")
    host, port = decode_host(raw, 0, len(raw) == 28)
    (offset,) = _I64.unpack_from(raw, len(raw) - 8)
    return host, port, offset


@dataclass(slots=True)
class Message:
    """What a producer hands the store: everything but the store-assigned fields."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    sysflag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)


@dataclass(slots=True)
class Record:
    """One decoded commit log record (or a BLANK filler, ``magic == MAGIC_BLANK``)."""

    physical_offset: int  # where the record was found
    total_size: int
    magic: int
    body_crc: int = 0
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    stored_physical_offset: int = 0  # PHYSICALOFFSET field as written
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("0.0.0.0", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("0.0.0.0", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body: bytes = b""
    topic: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def is_blank(self) -> bool:
        return self.magic == MAGIC_BLANK

    @property
    def end(self) -> int:
        return self.physical_offset + self.total_size

    @property
    def crc_ok(self) -> bool:
        return self.is_blank or body_crc(self.body) == self.body_crc

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def msg_id(self) -> str:
        return message_id(self.store_host[0], self.store_host[1], self.stored_physical_offset)


def encoded_length(topic_len: int, body_len: int, props_len: int, sysflag: int = 0) -> int:
    """Total record size for the given payload lengths (``CommitLog.calMsgLength``)."""
    topic_width = 1 if topic_len <= MAX_TOPIC_LENGTH_V1 else 2
    return (
        4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
        + _host_len(sysflag, SYSFLAG_BORNHOST_V6)
        + 8
        + _host_len(sysflag, SYSFLAG_STOREHOST_V6)
        + 4 + 8
        + 4 + body_len
        + topic_width + topic_len
        + 2 + props_len
    )  # fmt: skip


@dataclass(slots=True)
class EncodedMessage:
    """A message serialised once, ready to be stamped with store fields at append time.

    ``data`` holds a full record whose QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are
    placeholders; :meth:`stamp` patches them in place (the body CRC does not cover them).
    """

    data: bytearray
    store_timestamp_pos: int
    topic: str
    queue_id: int
    tags_code: int

    def __len__(self) -> int:
        return len(self.data)

    def stamp(self, queue_offset: int, physical_offset: int, store_timestamp: int) -> bytearray:
        data = self.data
        _QUEUE_AND_PHYSICAL_OFFSET.pack_into(
            data, OFFSET_QUEUEOFFSET, queue_offset, physical_offset
        )
        _I64.pack_into(data, self.store_timestamp_pos, store_timestamp)
        return data


# QUEUEOFFSET i64 | PHYSICALOFFSET i64: adjacent, stamped together at append time
_QUEUE_AND_PHYSICAL_OFFSET = struct.Struct(">qq")


@functools.lru_cache(maxsize=8)
def _fixed_struct(born_host_len: int, store_host_len: int) -> struct.Struct:
    """Everything from TOTALSIZE to BODYLENGTH in one pack, for the given host widths."""
    return struct.Struct(
        ">iI"  # TOTALSIZE, MAGICCODE
        "i"  # BODYCRC
        "i"  # QUEUEID
        "i"  # FLAG
        "q"  # QUEUEOFFSET (placeholder, stamped at append)
        "q"  # PHYSICALOFFSET (placeholder, stamped at append)
        "i"  # SYSFLAG
        "q"  # BORNTIMESTAMP
        f"{born_host_len}s"  # BORNHOST: address + port
        "q"  # STORETIMESTAMP (placeholder, stamped at append)
        f"{store_host_len}s"  # STOREHOST: address + port
        "i"  # RECONSUMETIMES
        "q"  # PREPAREDTRANSACTIONOFFSET
        "i"  # BODYLENGTH
    )


@functools.lru_cache(maxsize=4096)
def _topic_part(topic: str) -> tuple[bytes, bool]:
    """TOPICLENGTH + topic bytes, and whether the record needs the v2 magic (i16 length)."""
    topic_b = topic.encode("utf-8")
    if not topic_b:
        raise ValueError("topic must not be empty")
    if len(topic_b) > MAX_TOPIC_LENGTH_V2:
        raise ValueError(f"topic is {len(topic_b)} bytes, at most {MAX_TOPIC_LENGTH_V2}")
    if len(topic_b) > MAX_TOPIC_LENGTH_V1:
        return _I16.pack(len(topic_b)) + topic_b, True
    return _U8.pack(len(topic_b)) + topic_b, False


@functools.lru_cache(maxsize=4096)
def _properties_part(props: str) -> bytes:
    """PROPERTIESLENGTH + properties bytes."""
    props_b = props.encode("utf-8")
    if len(props_b) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties are {len(props_b)} bytes, at most {MAX_PROPERTIES_LENGTH}")
    return _I16.pack(len(props_b)) + props_b


def encode_message(msg: Message, store_host: tuple[str, int]) -> EncodedMessage:
    """Serialise ``msg`` as a record (v2 magic only when the topic needs it)."""
    topic_part, v2 = _topic_part(msg.topic)
    props = msg.properties
    props_part = _properties_part(
        "".join([f"{k}\x01{v}\x02" for k, v in props.items()]) if props else ""
    )
    born_b, born_v6 = encode_host(*msg.born_host)
    store_b, store_v6 = encode_host(*store_host)
    sysflag = msg.sysflag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    if born_v6:
        sysflag |= SYSFLAG_BORNHOST_V6
    if store_v6:
        sysflag |= SYSFLAG_STOREHOST_V6
    body = msg.body
    fixed = _fixed_struct(len(born_b), len(store_b))
    body_len = len(body)
    total = fixed.size + body_len + len(topic_part) + len(props_part)
    head = fixed.pack(
        total,
        MAGIC_V2 if v2 else MAGIC_V1,
        zlib.crc32(body) & 0x7FFFFFFF,  # body_crc()
        msg.queue_id,
        msg.flag,
        0,  # QUEUEOFFSET: stamped at append
        0,  # PHYSICALOFFSET: stamped at append
        sysflag,
        msg.born_timestamp,
        born_b,
        0,  # STORETIMESTAMP: stamped at append
        store_b,
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        body_len,
    )
    buf = bytearray().join((head, body, topic_part, props_part))
    tags = props.get(PROPERTY_TAGS) if props else None
    return EncodedMessage(
        buf, HEAD.size + len(born_b), msg.topic, msg.queue_id, tags_hash_code(tags) if tags else 0
    )


def encode_blank(remaining: int) -> bytes:
    """The BLANK filler header closing a file with ``remaining`` bytes left."""
    return PREFIX.pack(remaining, MAGIC_BLANK)


def decode_record(
    buf: bytes | bytearray | memoryview,
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

    if pos + 8 > end_limit:
        raise bad(f"only {end_limit - pos} bytes left, a record header needs 8")
    total, magic = PREFIX.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        if total < 8 or pos + total > end_limit:
            raise bad(f"BLANK record claims {total} bytes, {end_limit - pos} left")
        return Record(phys, total, magic)
    if magic not in MAGICS:
        raise bad(f"bad magic code 0x{magic:08X}")
    if total <= 0 or pos + total > end_limit:
        raise bad(f"record size {total} runs past the end ({end_limit - pos} bytes left)")
    minimum = encoded_length(0, 0, 0)
    if total < minimum:
        raise bad(f"record size {total} is below the minimum {minimum}")
    try:
        (_, _, crc, queue_id, flag, queue_offset, stored_phys, sysflag, born_ts) = HEAD.unpack_from(
            buf, pos
        )
        p = pos + HEAD.size
        born_v6 = bool(sysflag & SYSFLAG_BORNHOST_V6)
        born_host = decode_host(buf, p, born_v6)
        p += 20 if born_v6 else 8
        (store_ts,) = _I64.unpack_from(buf, p)
        p += 8
        store_v6 = bool(sysflag & SYSFLAG_STOREHOST_V6)
        store_host = decode_host(buf, p, store_v6)
        p += 20 if store_v6 else 8
        reconsume, prepared = _STORE_TAIL.unpack_from(buf, p)
        p += _STORE_TAIL.size
        (body_len,) = I32.unpack_from(buf, p)
        p += 4
        rec_end = pos + total
        if body_len < 0 or p + body_len > rec_end:
            raise bad(f"body length {body_len} runs past the record end")
        body = bytes(buf[p : p + body_len]) if with_body else b""
        p += body_len
        if magic == MAGIC_V2:
            (topic_len,) = _I16.unpack_from(buf, p)
            p += 2
        else:
            (topic_len,) = _U8.unpack_from(buf, p)
            p += 1
        if topic_len < 0 or p + topic_len > rec_end:
            raise bad(f"topic length {topic_len} runs past the record end")
        topic = bytes(buf[p : p + topic_len]).decode("utf-8")
        p += topic_len
        (props_len,) = _I16.unpack_from(buf, p)
        p += 2
        if props_len < 0 or p + props_len != rec_end:
            raise bad(
                f"properties length {props_len} does not end at the record end "
                f"({rec_end - p} bytes left)"
            )
        props = string_to_properties(bytes(buf[p : p + props_len]).decode("utf-8"))
    except CorruptRecordError:
        raise
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise bad(f"malformed record: {exc}") from exc
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


def scan_records(
    buf: bytes | bytearray | memoryview,
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
