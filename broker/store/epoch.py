"""The epoch file: which master epoch wrote which part of the commit log (RocketMQ 5's
EpochFileCache, file ``epochFileCheckpoint`` in the store root).

An entry ``(epoch, startOffset)`` says the bytes from ``startOffset`` up to the next entry's start
(or the log end) were written while ``epoch``'s master ruled. A promotion appends a new epoch at
the new master's log end; a rejoining node compares its entries with its new master's to find
the last point both logs agree on (``consistent_point``) and truncates above it.

An entry can outlive its bytes: a slave adopts its master's epochs (durable) before the bytes
they describe are flushed, so a power loss leaves it entries that start at or past its recovered
log end. Such a node holds no byte of those epochs; ranked by them it would pass for the most
up-to-date node (sim seed 465064305). So a candidate's rank uses ``held_epoch`` (the epoch of
the last byte it holds), and a node's start cuts the file to its log (``cut_to_log``,
RocketMQ's ``truncateSuffixByOffset``). The epoch a node *knows* never goes down with such a
cut (``highest``): a promotion hands out an epoch above every one a node has known, so an epoch
number is never given to two histories.

On disk (text, written atomically with fsync)::

    haproof-epochs v1
    <epoch> <startOffset>        one line per entry, epochs and offsets ascending
    highest <epoch>              only when above the last entry's (entries cut to the log)
    crc <crc32 of the lines between the header and this one>
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


def held_epoch(entries: list[EpochEntry], log_end: int) -> int:
    """The epoch that wrote the last byte of a log ending at ``log_end`` (0: an empty log or no
    entry below its end): what ranks a candidate, not an entry that names no byte it holds."""
    held = [e.epoch for e in entries if e.start_offset < log_end]
    return held[-1] if held else 0


def ends(entries: list[EpochEntry], log_end: int) -> list[int]:
    """Each entry's end: the next entry's start, the log end for the last one."""
    return [e.start_offset for e in entries[1:]] + [log_end] if entries else []


def consistent_point(
    mine: list[EpochEntry], my_end: int, theirs: list[EpochEntry], their_end: int
) -> int | None:
    """The offset up to which two logs hold the same bytes, by their epochs: the latest epoch
    both have with the same start, ending at the smaller of its two ends. ``None`` when they
    share no epoch (nothing can be assumed). An entry of mine starting at or past my end holds
    no byte (RocketMQ's truncateSuffixByOffset drops it): it neither matches nor cuts, and a
    log holding no byte shares its empty prefix with any master (sim seed 269174976: a slave
    that had adopted epoch 1 before any byte, whose master lost it at its start-up cut, was
    refused for good)."""
    mine = [e for e in mine if e.start_offset < my_end]
    if not mine and my_end == 0:
        return 0
    their_at = {e.epoch: (e, end) for e, end in zip(theirs, ends(theirs, their_end), strict=True)}
    for e, my_e_end in reversed(list(zip(mine, ends(mine, my_end), strict=True))):
        found = their_at.get(e.epoch)
        if found is not None and found[0].start_offset == e.start_offset:
            return min(my_e_end, found[1])
    return None


class EpochFile:
    """Load with ``EpochFile.load(store_root)``; every change is persisted before it returns."""

    def __init__(self, path: str, entries: list[EpochEntry], highest: int = 0) -> None:
        self.path = path
        self.entries = entries
        self.highest = max([highest] + [e.epoch for e in entries[-1:]])

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
        return cls(path, *cls._parse(path, text))

    @staticmethod
    def _parse(path: str, text: str) -> tuple[list[EpochEntry], int]:
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
        highest = 0
        if body and body[-1].startswith("highest "):
            try:
                highest = int(body[-1][8:])
            except ValueError:
                raise EpochFileError(f"{path}:{len(body) + 1}: bad line {body[-1]!r}") from None
            body = body[:-1]
        entries = []
        for n, line in enumerate(body, start=2):
            try:
                epoch, start = (int(x) for x in line.split())
            except ValueError:
                raise EpochFileError(f"{path}:{n}: bad epoch entry {line!r}") from None
            entries.append(EpochEntry(epoch, start))
        EpochFile._check(path, entries)
        return entries, highest

    @staticmethod
    def _check(path: str, entries: list[EpochEntry]) -> None:
        for a, b in zip(entries, entries[1:], strict=False):
            if b.epoch <= a.epoch or b.start_offset < a.start_offset:
                raise EpochFileError(f"{path}: epoch entries out of order: {a} then {b}")

    def _persist(self) -> None:
        lines = [f"{e.epoch} {e.start_offset}" for e in self.entries]
        if self.highest > (self.entries[-1].epoch if self.entries else 0):
            lines.append(f"highest {self.highest}")
        body = "\n".join(lines)
        crc = f"{zlib.crc32(body.encode()):08x}"
        parts = [HEADER, *([body] if body else []), f"crc {crc}"]
        atomic_write(self.path, ("\n".join(parts) + "\n").encode())

    @property
    def current_epoch(self) -> int:
        """The highest epoch this node has known (never lower after a cut of its entries)."""
        return self.highest

    def append(self, epoch: int, start_offset: int) -> None:
        entries = [*self.entries, EpochEntry(epoch, start_offset)]
        self._check(self.path, entries)
        self.entries = entries
        self.highest = max(self.highest, epoch)
        self._persist()
        log.info("epoch %d starts at offset %d", epoch, start_offset)

    def replace(self, entries: list[EpochEntry]) -> None:
        """Adopt another node's entries (a slave follows its master's history)."""
        self._check(self.path, entries)
        self.entries = list(entries)
        self.highest = max([self.highest] + [e.epoch for e in entries[-1:]])
        self._persist()

    def cut_to_log(self, log_end: int) -> list[EpochEntry]:
        """Drop the entries that start at or past ``log_end`` (RocketMQ's
        truncateSuffixByOffset; the last kept entry then ends at ``log_end``), persisted
        atomically; ``current_epoch`` stays. The dropped entries are returned."""
        kept = [e for e in self.entries if e.start_offset < log_end]
        dropped = self.entries[len(kept) :]
        if dropped:
            self.entries = kept
            self._persist()
        return dropped

    def to_json(self, log_end: int) -> list[dict]:
        return [
            e.to_json(end) for e, end in zip(self.entries, ends(self.entries, log_end), strict=True)
        ]

    @staticmethod
    def from_json(items: list[dict]) -> list[EpochEntry]:
        return [EpochEntry(int(i["epoch"]), int(i["startOffset"])) for i in items]
