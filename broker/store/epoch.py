"""The epoch file: which master epoch wrote which part of the commit log (RocketMQ 5's
EpochFileCache, file ``epochFileCheckpoint`` in the store root).

An entry ``(epoch, startOffset)`` says the bytes from ``startOffset`` up to the next entry's start
(or the log end) were written while ``epoch``'s master ruled. A promotion appends a new epoch at
the new master's log end; a rejoining node compares its entries with its new master's to find
the last point both logs agree on (``consistent_point``) and truncates above it.

On disk (text, written atomically with fsync)::

    haproof-epochs v1
    <epoch> <startOffset>        one line per entry, epochs and offsets ascending
    crc <crc32 of the entry lines>
"""

from __future__ import annotations

import logging
import os
import zlib
from dataclasses import dataclass

from broker.store.checkpoint import atomic_write
from contracts.errors import StoreError

log = logging.getLogger(__name__)

FILE_NAME = "epochFileCheckpoint"
HEADER = "haproof-epochs v1"


class EpochFileError(StoreError):
    """The epoch file is unreadable or an entry would break its order."""


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int

    def to_json(self, end_offset: int) -> dict:
        return {"epoch": self.epoch, "startOffset": self.start_offset, "endOffset": end_offset}


def ends(entries: list[EpochEntry], log_end: int) -> list[int]:
    """Each entry's end: the next entry's start, the log end for the last one."""
    return [e.start_offset for e in entries[1:]] + [log_end] if entries else []


def consistent_point(
    mine: list[EpochEntry], my_end: int, theirs: list[EpochEntry], their_end: int
) -> int | None:
    """The offset up to which two logs hold the same bytes, by their epochs: the latest epoch
    both have with the same start, ending at the smaller of its two ends. ``None`` when they
    share no epoch (nothing can be assumed)."""
    their_at = {e.epoch: (e, end) for e, end in zip(theirs, ends(theirs, their_end), strict=True)}
    for e, my_e_end in reversed(list(zip(mine, ends(mine, my_end), strict=True))):
        found = their_at.get(e.epoch)
        if found is not None and found[0].start_offset == e.start_offset:
            return min(my_e_end, found[1])
    return None


class EpochFile:
    """Load with ``EpochFile.load(store_root)``; every change is persisted before it returns."""

    def __init__(self, path: str, entries: list[EpochEntry]) -> None:
        self.path = path
        self.entries = entries

    @classmethod
    def load(cls, store_root: str) -> EpochFile:
        path = os.path.join(store_root, FILE_NAME)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            return cls(path, [])
        except OSError as exc:
            raise EpochFileError(f"{path}: cannot read the epoch file: {exc}") from exc
        return cls(path, cls._parse(path, text))

    @staticmethod
    def _parse(path: str, text: str) -> list[EpochEntry]:
        lines = text.splitlines()
        if not lines or lines[0] != HEADER:
            raise EpochFileError(f"{path}: not an epoch file (first line {lines[:1]!r})")
        if len(lines) < 2 or not lines[-1].startswith("crc "):
            raise EpochFileError(f"{path}: truncated epoch file (no crc line)")
        body = lines[1:-1]
        want = lines[-1][4:]
        got = f"{zlib.crc32(chr(10).join(body).encode()):08x}"
        if want != got:
            raise EpochFileError(f"{path}: epoch file checksum {want} != {got} (corrupt)")
        entries = []
        for n, line in enumerate(body, start=2):
            try:
                epoch, start = (int(x) for x in line.split())
            except ValueError:
                raise EpochFileError(f"{path}:{n}: bad epoch entry {line!r}") from None
            entries.append(EpochEntry(epoch, start))
        EpochFile._check(path, entries)
        return entries

    @staticmethod
    def _check(path: str, entries: list[EpochEntry]) -> None:
        for a, b in zip(entries, entries[1:], strict=False):
            if b.epoch <= a.epoch or b.start_offset < a.start_offset:
                raise EpochFileError(f"{path}: epoch entries out of order: {a} then {b}")

    def _persist(self) -> None:
        body = "\n".join(f"{e.epoch} {e.start_offset}" for e in self.entries)
        crc = f"{zlib.crc32(body.encode()):08x}"
        parts = [HEADER, *([body] if body else []), f"crc {crc}"]
        atomic_write(self.path, ("\n".join(parts) + "\n").encode())

    @property
    def current_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def append(self, epoch: int, start_offset: int) -> None:
        entries = [*self.entries, EpochEntry(epoch, start_offset)]
        self._check(self.path, entries)
        self.entries = entries
        self._persist()
        log.info("epoch %d starts at offset %d", epoch, start_offset)

    def replace(self, entries: list[EpochEntry]) -> None:
        """Adopt another node's entries (a slave follows its master's history)."""
        self._check(self.path, entries)
        self.entries = list(entries)
        self._persist()

    def to_json(self, log_end: int) -> list[dict]:
        return [
            e.to_json(end) for e, end in zip(self.entries, ends(self.entries, log_end), strict=True)
        ]

    @staticmethod
    def from_json(items: list[dict]) -> list[EpochEntry]:
        return [EpochEntry(int(i["epoch"]), int(i["startOffset"])) for i in items]
