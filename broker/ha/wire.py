"""The classic HA stream (RocketMQ 4.x HAService/HAConnection/HAClient), big-endian.

Slave → master, after every append and as a heartbeat::

    REPORT           i64  the slave's max physical offset (everything below it is on the slave)

Master → slave, a frame per transfer::

    TRANSFER_HEADER  i64  physical offset of the first body byte
                     i32  body size (0: a heartbeat, no body)
    body             the commit log bytes [offset, offset + size): at most
                     haTransferBatchSize, never across a mapped file end

No handshake, no framing beyond this: a connection carries nothing else.
"""

from __future__ import annotations

import struct

from contracts.errors import HaproofError

REPORT = struct.Struct(">q")  # slave max physical offset
TRANSFER_HEADER = struct.Struct(">qi")  # body physical offset, body size
# A body larger than this is garbage, whatever the master's batch size (RocketMQ's is 32 KiB).
MAX_BODY_BYTES = 64 * 1024 * 1024


class HAProtocolError(HaproofError):
    """A peer broke the HA protocol: the connection is dropped, nothing else."""


def build_report(max_offset: int) -> bytes:
    return REPORT.pack(max_offset)


def read_report(data: bytes) -> int:
    (offset,) = REPORT.unpack(data)
    if offset < 0:
        raise HAProtocolError(f"slave reported a negative offset {offset}")
    return offset


def build_header(offset: int, size: int) -> bytes:
    return TRANSFER_HEADER.pack(offset, size)


def read_header(data: bytes) -> tuple[int, int]:
    offset, size = TRANSFER_HEADER.unpack(data)
    if offset < 0:
        raise HAProtocolError(f"master sent a frame at negative offset {offset}")
    if not 0 <= size <= MAX_BODY_BYTES:
        raise HAProtocolError(f"master sent a frame of {size} bytes at {offset}")
    return offset, size
