"""The record CRC a writer may append as the last property (RocketMQ 5's
``enabledAppendPropCRC``: ``CommitLog.CRC32_RESERVED_LEN``, ``MessageDecoder.createCrc32``,
checked by ``CommitLog.checkMessageAndReturnSize``).

The last 20 bytes of the record are the property ``__CRC32#`` (``MessageConst.PROPERTY_CRC32``):
the key, ``\\x01``, ten ASCII digits, ``\\x02``. The digits are the CRC32 (``& 0x7FFFFFFF``, as
the body CRC) of every byte of the record before those 20, queue and physical offsets and store
timestamp included, written least significant digit first (``createCrc32``). It covers the
topic and the properties, which the body CRC does not: a record torn inside them fails it.

A power loss that tears a record's last page leaves zeros from some byte on: the CRC fails when
the zeros start inside it, and a record ending with three zero bytes (the zeros reached the key)
is torn too, as no writer ends one so. A record carries the CRC when its properties end with
such a whole property (the key right after the properties' start or a ``\\x02``); a writer
drops any ``__CRC32#`` a message brought (``encode_message``), so only a writer's own CRC is
ever found there.
"""

from __future__ import annotations

import zlib

PROPERTY_CRC32 = "__CRC32#"
_KEY = PROPERTY_CRC32.encode() + b"\x01"
CRC32_RESERVED_LEN = len(_KEY) + 10 + 1  # 20
PLACEHOLDER = _KEY + b"0" * 10 + b"\x02"


def crc_digits(crc: int) -> bytes:
    """``createCrc32``'s ten digits: least significant first."""
    return bytes(0x30 + (crc // 10**i) % 10 for i in range(10))


def record_crc(record) -> int:
    """The CRC over a whole record's bytes but its last ``CRC32_RESERVED_LEN``."""
    return zlib.crc32(memoryview(record)[:-CRC32_RESERVED_LEN]) & 0x7FFFFFFF


def fill_crc(data: bytearray) -> None:
    """Write the CRC of a record ending with ``PLACEHOLDER`` (all other fields final)."""
    data[-11:-1] = crc_digits(record_crc(data))


def carried_crc_ok(view, pos: int, total: int) -> bool | None:
    """For the record of ``total`` bytes at ``view[pos:]``: None when it carries no CRC
    property, else whether its CRC matches; False too for a record ending with three zero
    bytes (torn, whether or not it carried the CRC). The key in place with anything but ten
    digits and ``\x02`` after it fails (torn)."""
    end = pos + total
    key_at = end - CRC32_RESERVED_LEN
    tail = bytes(view[key_at:end])
    if total < CRC32_RESERVED_LEN + 2:
        return None
    if not tail.startswith(_KEY):
        # a tear that reached the key: no written record ends with three zero bytes (it ends
        # with its properties' text or a topic's last character and a zero properties length)
        return False if tail[-3:] == b"\0\0\0" else None
    whole = view[key_at - 1] == 0x02 or bytes(view[key_at - 2 : key_at]) == b"\x00\x14"
    if not whole:
        return None  # inside another property's value, not a property of its own
    digits = tail[len(_KEY) : -1]
    if tail[-1] != 0x02 or not (digits.isascii() and digits.isdigit()):
        return False  # the key in place, the rest torn
    want = sum((d - 0x30) * 10**i for i, d in enumerate(digits))
    return want == record_crc(view[pos:end])
