"""The store checkpoint file (RocketMQ StoreCheckpoint): a 4 KiB file of big-endian i64 stamps.

Layout::

    0   physicMsgTimestamp   i64  store time of the last flushed commit log record
    8   logicsMsgTimestamp   i64  store time of the last flushed consume queue entry's record
    16  indexMsgTimestamp    i64  index files (not used here, kept as read)
    24  masterFlushedOffset  i64  (RocketMQ 4.9+; 0 when absent)
    32  confirmPhyOffset     i64  (RocketMQ 5; 0 when absent)
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from contracts.errors import CorruptFileError

CHECKPOINT = struct.Struct(
    ">q"  # physicMsgTimestamp
    "q"  # logicsMsgTimestamp
    "q"  # indexMsgTimestamp
    "q"  # masterFlushedOffset
    "q"  # confirmPhyOffset
)
FILE_SIZE = 4096


@dataclass(slots=True)
class StoreCheckpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    @property
    def min_timestamp(self) -> int:
        """The safe point for abnormal recovery: the older of the commit log and queue stamps."""
        ts = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(0, ts - 3000)  # RocketMQ steps back 3 s for clock slack

    @classmethod
    def read(cls, path: str) -> StoreCheckpoint:
        try:
            with open(path, "rb") as fh:
                data = fh.read(FILE_SIZE)
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            raise CorruptFileError(path, f"cannot read checkpoint: {exc.strerror}") from exc
        if len(data) < 24:
            raise CorruptFileError(path, f"checkpoint is {len(data)} bytes, expected {FILE_SIZE}")
        data = data.ljust(CHECKPOINT.size, b"\0")
        stamps = CHECKPOINT.unpack_from(data)
        if any(s < 0 for s in stamps):
            raise CorruptFileError(path, f"checkpoint holds a negative value {stamps}")
        return cls(*stamps)

    def write(self, path: str) -> None:
        """Write atomically (temp file, fsync, rename)."""
        buf = bytearray(FILE_SIZE)
        CHECKPOINT.pack_into(
            buf,
            0,
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        atomic_write(path, bytes(buf))


def atomic_write(path: str, data: bytes, keep_backup: bool = False) -> None:
    """Temp file, fsync, (optional ``.bak`` of the old file), rename, fsync the directory."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if keep_backup and os.path.exists(path):
        bak = f"{path}.bak"
        with open(path, "rb") as src, open(bak + ".tmp", "wb") as dst:
            dst.write(src.read())
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(bak + ".tmp", bak)
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
