"""The classic HA stream (RocketMQ 4.x HAService/HAConnection/HAClient), big-endian.

Slave → master, after every append and as a heartbeat::

    REPORT           i64  the slave's max physical offset (everything below it is on the slave)

Master → slave, a frame per transfer::

    TRANSFER_HEADER  i64  physical offset of the first body byte
                     i32  body size (0: a heartbeat, no body)
    body             the commit log bytes [offset, offset + size): at most
                     haTransferBatchSize, never across a mapped file end

In controller mode (``enableControllerMode``, on every node of the group) the header carries the
master's confirmOffset too, as RocketMQ 5's AutoSwitchHAConnection header does; the slave serves
consumers only up to it (``readUnCommitted`` aside)::

    CONFIRM_HEADER   i64 offset, i32 size (as above), i64 the master's confirmOffset

With ``aclEnable`` the master first sends a fresh nonce, and the slave answers one signed
handshake frame (our own; RocketMQ's classic HA has no authentication)::

    CHALLENGE        4 bytes  b"HACH", then 32 hex characters: the nonce (master → slave)
    HANDSHAKE        4 bytes  b"HAAC"
                     u16      payload length (at most 1024)
                     payload  UTF-8 lines ``key=value``: AccessKey, NodeName, Purpose=HA,
                              SignatureVersion=2, SignTimestamp (ms), SignNonce (the master's),
                              Signature (scheme 2 with the HA handshake's own purpose, see
                              broker/acl/signing.py: valid for this connection and nothing else)

Without ACL nothing precedes the first REPORT: the classic wire format, unchanged.
"""

from __future__ import annotations

import struct

from contracts.errors import HaproofError

REPORT = struct.Struct(">q")  # slave max physical offset
TRANSFER_HEADER = struct.Struct(">qi")  # body physical offset, body size
CONFIRM_HEADER = struct.Struct(">qiq")  # controller mode: + the master's confirmOffset
# A body larger than this is garbage, whatever the master's batch size (RocketMQ's is 32 KiB).
MAX_BODY_BYTES = 64 * 1024 * 1024


HANDSHAKE_MAGIC = b"HAAC"
HANDSHAKE_HEAD = struct.Struct(">4sH")  # magic, payload length
HANDSHAKE_MAX_BYTES = 1024
HANDSHAKE_PURPOSE = "HA"


CHALLENGE_MAGIC = b"HACH"
CHALLENGE_NONCE_CHARS = 32
CHALLENGE_SIZE = len(CHALLENGE_MAGIC) + CHALLENGE_NONCE_CHARS


class HAProtocolError(HaproofError):
    """A peer broke the HA protocol: the connection is dropped, nothing else."""


def build_handshake(fields: dict[str, str]) -> bytes:
    payload = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
    if len(payload) > HANDSHAKE_MAX_BYTES:
        raise ValueError(f"HA handshake of {len(payload)} bytes is too long")
    return HANDSHAKE_HEAD.pack(HANDSHAKE_MAGIC, len(payload)) + payload


def build_challenge(nonce: str) -> bytes:
    if len(nonce) != CHALLENGE_NONCE_CHARS:
        raise ValueError(f"an HA challenge nonce has {CHALLENGE_NONCE_CHARS} characters")
    return CHALLENGE_MAGIC + nonce.encode("ascii")


def read_challenge(data: bytes) -> str:
    """The master's nonce, after checking the magic and that it is hex."""
    if data[:4] != CHALLENGE_MAGIC:
        raise HAProtocolError(f"expected the master's HA challenge, got {data[:8]!r}")
    nonce = data[4:].decode("ascii", "replace")
    if len(nonce) != CHALLENGE_NONCE_CHARS or any(c not in "0123456789abcdef" for c in nonce):
        raise HAProtocolError("the master's HA challenge is not a hex nonce")
    return nonce


def read_handshake_head(data: bytes) -> int:
    """The payload length, after checking the magic."""
    magic, size = HANDSHAKE_HEAD.unpack(data)
    if magic != HANDSHAKE_MAGIC:
        raise HAProtocolError(f"expected a signed HA handshake, got {data[:8]!r}")
    if size > HANDSHAKE_MAX_BYTES:
        raise HAProtocolError(f"HA handshake of {size} bytes (at most {HANDSHAKE_MAX_BYTES})")
    return size


def read_handshake_payload(payload: bytes) -> dict[str, str]:
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HAProtocolError(f"HA handshake is not UTF-8: {exc}") from exc
    fields = {}
    for line in text.split("\n"):
        key, sep, value = line.partition("=")
        if not sep or key in fields:
            raise HAProtocolError(f"HA handshake line {line[:40]!r} is not a new key=value")
        fields[key] = value
    return fields


def build_report(max_offset: int) -> bytes:
    return REPORT.pack(max_offset)


def read_report(data: bytes) -> int:
    (offset,) = REPORT.unpack(data)
    if offset < 0:
        raise HAProtocolError(f"slave reported a negative offset {offset}")
    return offset


def build_header(offset: int, size: int, confirm: int | None = None) -> bytes:
    """A frame header; with ``confirm`` (controller mode) the CONFIRM_HEADER."""
    if confirm is None:
        return TRANSFER_HEADER.pack(offset, size)
    return CONFIRM_HEADER.pack(offset, size, confirm)


def read_confirm_header(data: bytes) -> tuple[int, int, int]:
    """A controller mode frame header: offset, size and the master's confirmOffset."""
    offset, size = read_header(data[: TRANSFER_HEADER.size])
    (confirm,) = struct.unpack_from(">q", data, TRANSFER_HEADER.size)
    if confirm < 0:
        raise HAProtocolError(f"master sent a negative confirmOffset {confirm} at {offset}")
    return offset, size, confirm


def read_header(data: bytes) -> tuple[int, int]:
    offset, size = TRANSFER_HEADER.unpack(data)
    if offset < 0:
        raise HAProtocolError(f"master sent a frame at negative offset {offset}")
    if not 0 <= size <= MAX_BODY_BYTES:
        raise HAProtocolError(f"master sent a frame of {size} bytes at {offset}")
    return offset, size
