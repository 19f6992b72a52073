"""The record builder: a :class:`~contracts.record.model.Message` serialised once
(:func:`encode_message`), stamped with its store fields at append time, and the BLANK filler
that closes a file (:func:`encode_blank`). The reader is ``contracts/record/reader.py``."""

from __future__ import annotations

import functools
import struct
import zlib
from dataclasses import dataclass

from contracts.record.layout import (
    HEAD,
    I16,
    I64,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MAX_TOPIC_LENGTH_V2,
    OFFSET_QUEUEOFFSET,
    PREFIX,
    QUEUE_AND_PHYSICAL_OFFSET,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    U8,
    encode_host,
)
from contracts.record.model import Message
from contracts.record.prop_crc import PLACEHOLDER, PROPERTY_CRC32, fill_crc
from contracts.record.properties import PROPERTY_TAGS, tags_hash_code

PLACEHOLDER_TEXT = PLACEHOLDER.decode()


@dataclass(slots=True)
class EncodedMessage:
    """A message serialised once, ready to be stamped with store fields at append time.

    ``data`` holds a full record whose QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are
    placeholders; :meth:`stamp` patches them in place (the body CRC does not cover them; the
    record CRC property, when ``prop_crc``, does: ``stamp`` computes it last).
    """

    data: bytearray
    store_timestamp_pos: int
    topic: str
    queue_id: int
    tags_code: int
    prop_crc: bool = False  # ends with the record CRC property, filled by stamp

    def __len__(self) -> int:
        return len(self.data)

    def stamp(self, queue_offset: int, physical_offset: int, store_timestamp: int) -> bytearray:
        data = self.data
        QUEUE_AND_PHYSICAL_OFFSET.pack_into(data, OFFSET_QUEUEOFFSET, queue_offset, physical_offset)
        I64.pack_into(data, self.store_timestamp_pos, store_timestamp)
        if self.prop_crc:
            fill_crc(data)
        return data


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
        return I16.pack(len(topic_b)) + topic_b, True
    return U8.pack(len(topic_b)) + topic_b, False


@functools.lru_cache(maxsize=4096)
def _properties_part(props: str) -> bytes:
    """PROPERTIESLENGTH + properties bytes."""
    props_b = props.encode("utf-8")
    if len(props_b) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties are {len(props_b)} bytes, at most {MAX_PROPERTIES_LENGTH}")
    return I16.pack(len(props_b)) + props_b


def encode_message(
    msg: Message, store_host: tuple[str, int], prop_crc: bool = False
) -> EncodedMessage:
    """Serialise ``msg`` as a record (v2 magic only when the topic needs it); ``prop_crc``: end
    it with the record CRC property (``contracts/record/prop_crc.py``). A ``__CRC32#`` the
    message brought is dropped either way: only a writer's own CRC is ever found there."""
    topic_part, v2 = _topic_part(msg.topic)
    props = msg.properties
    if props and PROPERTY_CRC32 in props:
        props = {k: v for k, v in props.items() if k != PROPERTY_CRC32}
    text = "".join([f"{k}\x01{v}\x02" for k, v in props.items()]) if props else ""
    props_part = _properties_part(text + (PLACEHOLDER_TEXT if prop_crc else ""))
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
        buf,
        HEAD.size + len(born_b),
        msg.topic,
        msg.queue_id,
        tags_hash_code(tags) if tags else 0,
        prop_crc,
    )


def encode_blank(remaining: int) -> bytes:
    """The BLANK filler header closing a file with ``remaining`` bytes left."""
    return PREFIX.pack(remaining, MAGIC_BLANK)
