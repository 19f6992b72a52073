"""RocketMQ's offset msgId: the store host's address and port and the record's physical offset,
upper-case hex (``MessageDecoder.createMessageId`` / ``decodeMessageId``)."""

from __future__ import annotations

import functools

from contracts.record.layout import I64, decode_host, encode_host


def message_id(store_host: str, store_port: int, physical_offset: int) -> str:
    """RocketMQ's offset msgId: store host address + port + physical offset, upper-case hex."""
    packed, _ = encode_host(store_host, store_port)
    return (packed + I64.pack(physical_offset)).hex().upper()


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
    (offset,) = I64.unpack_from(raw, len(raw) - 8)
    return host, port, offset
