"""The single controller's durable event log: an append-only journal, fsynced before a change is
answered, plus a snapshot of the tables, replayed on start.

``{controllerStorePath}/journal``: records ``[u32 length][u32 crc32][event JSON]`` (big-endian).
``{controllerStorePath}/snapshot.json``: ``{"tables": ReplicaTables.to_snapshot()}`` written
atomically (temp file, fsync, rename, fsync of the directory) every ``snapshot_every`` events;
it names how many events it holds (``applied``), so a replay skips those journal records.

A record cut short at the journal's end (a crash inside a write, never answered) is cut off with
a warning; a bad record followed by more data is damage and start-up refuses, naming the offset.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from pathlib import Path

from broker.controller.events import Event, decode_event, encode_event
from broker.controller.state_machine import ControllerStateMachine
from broker.controller.tables import ReplicaTables
from contracts.errors import StoreError

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">II")
MAX_RECORD_BYTES = 1 << 20


class JournalDamagedError(StoreError):
    """The controller journal holds a bad record before its end: not a torn write."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def read_records(data: bytes, where: str) -> tuple[list[bytes], int]:
    """The whole records of a journal and the length they cover (a torn tail is left out)."""
    out, pos = [], 0
    while pos < len(data):
        if pos + _HEAD.size > len(data):
            break
        length, crc = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + length
        payload = data[pos + _HEAD.size : end]
        if length > MAX_RECORD_BYTES or end > len(data) or zlib.crc32(payload) != crc:
            if end >= len(data):
                break  # the last record, cut short: a torn write
            raise JournalDamagedError(
                f"{where}: bad record at byte {pos} (length {length}) followed by "
                f"{len(data) - pos} more bytes: the journal is damaged, not torn; move it "
                "aside and restore the controller from a peer or a backup"
            )
        out.append(payload)
        pos = end
    return out, pos


class Journal:
    """The embedded controller's log: ``append`` returns once the events are on disk and
    applied. Always the leader (a group of one)."""

    def __init__(
        self, directory: str | Path, sm: ControllerStateMachine, *, snapshot_every: int = 1000
    ) -> None:
        self.dir = Path(directory)
        self.sm = sm
        self.snapshot_every = snapshot_every
        self.path = self.dir / "journal"
        self.snapshot_path = self.dir / "snapshot.json"
        self._fd: int | None = None
        self._since_snapshot = 0

    def open(self) -> int:
        """Replay snapshot + journal into the state machine; the events replayed."""
        self.dir.mkdir(parents=True, exist_ok=True)
        skip = 0
        if self.snapshot_path.exists():
            doc = json.loads(self.snapshot_path.read_text())
            self.sm.restore(ReplicaTables.from_snapshot(doc["tables"]))
            skip = self.sm.tables.applied
        data = self.path.read_bytes() if self.path.exists() else b""
        records, good = read_records(data, str(self.path))
        if good < len(data):
            log.warning(
                "%s: a torn record at byte %d (%d bytes, never acknowledged) cut off",
                self.path,
                good,
                len(data) - good,
            )
            with open(self.path, "r+b") as f:
                f.truncate(good)
                os.fsync(f.fileno())
        for payload in records[skip:]:
            self.sm.apply(decode_event(payload))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _fsync_dir(self.dir)
        return len(records) - min(skip, len(records))

    def is_leader(self) -> bool:
        return True

    def leader_addr(self) -> str | None:
        return None

    async def barrier(self) -> bool:
        return False  # one controller: it leads from its start (the start's grace covers it)

    async def append(self, events: list[Event]) -> None:
        if self._fd is None:
            raise StoreError(f"{self.path}: journal not open")
        payloads = [encode_event(e) for e in events]
        buf = b"".join(_HEAD.pack(len(p), zlib.crc32(p)) + p for p in payloads)
        os.write(self._fd, buf)
        os.fsync(self._fd)
        for payload in payloads:
            self.sm.apply(decode_event(payload))
        self._since_snapshot += len(payloads)
        if self._since_snapshot >= self.snapshot_every:
            self.snapshot()

    def snapshot(self) -> None:
        with self.sm.lock:
            doc = {"tables": self.sm.tables.to_snapshot()}
        write_atomic(self.snapshot_path, json.dumps(doc, sort_keys=True).encode())
        self._since_snapshot = 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
