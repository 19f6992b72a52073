"""The RocketMQ commit log record's layout: field table, magic codes, flags, struct codecs, field
offsets, lengths and the host fields' encoding (``CommitLog.calMsgLength``, ``MessageDecoder``).

Record layout, all integers big-endian::

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

#: the fixed head every record (and a BLANK) starts with
PREFIX = struct.Struct(">iI")  # TOTALSIZE i32 | MAGICCODE u32

# The fixed part from TOTALSIZE up to and including BORNTIMESTAMP.
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
U8 = struct.Struct(">B")  # v1 TOPICLENGTH
I64 = struct.Struct(">q")  # BORNTIMESTAMP / STORETIMESTAMP alone
STORE_TAIL = struct.Struct(">iq")  # RECONSUMETIMES i32 | PREPAREDTRANSACTIONOFFSET i64
# QUEUEOFFSET i64 | PHYSICALOFFSET i64: adjacent, stamped together at append time
QUEUE_AND_PHYSICAL_OFFSET = struct.Struct(">qq")

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


def host_len(sysflag: int, v6_flag: int) -> int:
    """Bytes of a host field (address + port) under ``sysflag``'s IPv6 bit ``v6_flag``."""
    return 20 if sysflag & v6_flag else 8


def encoded_length(topic_len: int, body_len: int, props_len: int, sysflag: int = 0) -> int:
    """Total record size for the given payload lengths (``CommitLog.calMsgLength``)."""
    topic_width = 1 if topic_len <= MAX_TOPIC_LENGTH_V1 else 2
    return (
        4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
        + host_len(sysflag, SYSFLAG_BORNHOST_V6)
        + 8
        + host_len(sysflag, SYSFLAG_STOREHOST_V6)
        + 4 + 8
        + 4 + body_len
        + topic_width + topic_len
        + 2 + props_len
    )  # fmt: skip


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
