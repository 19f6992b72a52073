"""Telling a torn tail from damage in a commit log, and quarantining damage.

A crash leaves a *torn tail*: the last record of the log half written, nothing valid after it.
Damage (a flipped byte, a zeroed page, a stray write) is followed by valid records. Recovery
checks every record's magic, chaining and body CRC (RocketMQ's ``checkCRCOnRecover``); where the
walk stops it searches the rest of the log for the first valid record. None: a torn tail, dropped
as before. One: damage over ``[start, resume)``, and the valid records from ``resume`` on are
never deleted:

- a master refuses to start (:class:`StoreDamagedError` naming file, offset and extent) and moves
  nothing;
- a slave moves ``[start, found_end)`` into a side file under ``{storePathRootDir}/quarantine/``
  and truncates at ``start``, so HA refetches those bytes from its master;
- ``haproof store repair`` (offline) moves ``[start, resume)`` into a side file and fills the
  range with a record of topic ``HAPROOF_QUARANTINE`` flagged as a rolled-back transaction (never
  indexed, never delivered; a BLANK where the range reaches the file end), keeping the rest.

A valid record is one that decodes, says it is at its own physical offset and passes its CRC;
a BLANK must end exactly at its file end. Both side files and their ``.json`` descriptions are
written atomically; the node reports each as a ``recovered`` event once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass

from broker.clock import SYSTEM_CLOCK
from broker.store.checkpoint import atomic_write
from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue
from contracts import record_walk
from contracts.errors import StoreError
from contracts.record.builder import encode_blank, encode_message
from contracts.record.layout import (
    END_FILE_MIN_BLANK_LENGTH,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from contracts.record.model import Message
from contracts.record_walk import valid_step

log = logging.getLogger(__name__)

QUARANTINE_DIR = "quarantine"
QUARANTINE_TOPIC = "HAPROOF_QUARANTINE"
_MAGICS = [m.to_bytes(4, "big") for m in (MAGIC_V1, MAGIC_V2, MAGIC_BLANK)]
_SEARCH_CHUNK = 4 << 20


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes ``[start, resume)`` are not records; valid records run from ``resume`` to at least
    ``found_end`` (the end of the non-zero data)."""

    path: str  # the file holding ``start``
    file_start: int
    start: int
    resume: int
    found_end: int
    reason: str

    @property
    def extent(self) -> int:
        return self.resume - self.start

    def describe(self) -> str:
        return (
            f"{self.path}: damaged commit log at offset {self.start} (byte "
            f"{self.start - self.file_start} of the file), {self.extent} bytes "
            f"[{self.start}, {self.resume}) ({self.reason or 'zeroed bytes'}); valid records "
            f"resume at {self.resume} and run to {self.found_end}"
        )


class StoreDamagedError(StoreError):
    """Valid records follow damage: starting as master would serve a log with a hole (or, as
    RocketMQ does, delete everything after it)."""

    def __init__(self, damage: Damage, root: str) -> None:
        super().__init__(
            f"{damage.describe()}. Refusing to start as master; nothing was moved. Either run "
            f"`haproof store repair {root}` to quarantine the damaged range into a side file and "
            "keep the rest, or promote this group's slave (haproof admin promote) and restart "
            "this node as its slave so it refetches from the damage on"
        )
        self.damage = damage


def _valid_at(mf: MappedFile, pos: int) -> bool:
    rec, _ = valid_step(mf.buffer, pos, base_offset=mf.file_from_offset, limit=mf.file_size)
    return rec is not None


def _first_valid_in(mf: MappedFile, start: int) -> int | None:
    """Relative position of the first valid record at or after ``start`` in ``mf``."""
    buf = mf.buffer
    if start == 0 and _valid_at(mf, 0):
        return 0
    pos = max(start, 0)
    while pos < mf.file_size - 8:
        end = min(pos + _SEARCH_CHUNK, mf.file_size)
        hits = [h - 4 for m in _MAGICS for h in _find_all(buf, m, pos + 4, end + 4)]
        for cand in sorted(set(hits)):
            if cand >= max(start, 0) and _valid_at(mf, cand):
                return cand
        pos = end
    return None


def _find_all(buf, needle: bytes, lo: int, hi: int) -> list[int]:
    out = []
    i = buf.find(needle, lo, min(hi, len(buf)))
    while i >= 0:
        out.append(i)
        i = buf.find(needle, i + 1, min(hi, len(buf)))
    return out


def find_resume(queue: MappedFileQueue, start: int, found_end: int) -> int | None:
    """The offset of the first valid record in ``(start, found_end)``; None: nothing valid
    follows (a torn tail)."""
    for mf in queue.files:
        if mf.end_offset <= start or mf.file_from_offset >= found_end:
            continue
        rel = start - mf.file_from_offset + 1 if mf.file_from_offset <= start else 0
        pos = _first_valid_in(mf, rel)
        if pos is not None and mf.file_from_offset + pos < found_end:
            return mf.file_from_offset + pos
    return None


def walk_valid_log(queue: MappedFileQueue, offset: int) -> tuple[int, str]:
    """Walk valid records from ``offset`` across files (:func:`contracts.record_walk.walk_valid`
    in each); returns where the walk stopped and why ("" at the end of the written data)."""
    while True:
        mf = queue.find(offset)
        if mf is None:
            return offset, ""
        pos, reason, closed = record_walk.walk_valid(
            mf.buffer,
            offset - mf.file_from_offset,
            base_offset=mf.file_from_offset,
            limit=mf.file_size,
        )
        if not closed:
            return mf.file_from_offset + pos, reason
        offset = mf.end_offset


def found_end(queue: MappedFileQueue, valid_end: int) -> int:
    """End of the non-zero bytes at or after ``valid_end`` (what a crash or damage left)."""
    found = valid_end
    for mf in queue.files:
        if mf.end_offset <= valid_end:
            continue
        buf = mf.buffer
        start = max(0, valid_end - mf.file_from_offset)
        step = 1 << 16
        for p in range(start, mf.file_size, step):
            chunk = buf[p : min(p + step, mf.file_size)]
            stripped = chunk.rstrip(b"\x00")
            if stripped:
                found = mf.file_from_offset + p + len(stripped)
            elif p > start:
                break
    return found


def quarantine(
    root: str, queue: MappedFileQueue, start: int, end: int, reason: str, action: str
) -> str:
    """Copy the log's bytes ``[start, end)`` into ``{root}/quarantine/{start}-{end}.bin`` with
    a ``.json`` description (fsynced); returns the side file's path."""
    data = bytearray()
    offset = start
    while offset < end:
        mf = queue.find(offset)
        if mf is None:
            break
        rel = offset - mf.file_from_offset
        n = min(end - offset, mf.file_size - rel)
        data += mf.buffer[rel : rel + n]
        offset += n
    name = f"{start:020d}-{end:020d}"
    directory = os.path.join(root, QUARANTINE_DIR)
    n = 1
    while os.path.exists(os.path.join(directory, name + ".bin")):  # never overwrite evidence
        n += 1
        name = f"{start:020d}-{end:020d}.{n}"
    path = os.path.join(directory, name + ".bin")
    try:
        atomic_write(path, bytes(data))
        desc = {
            "start": start,
            "end": end,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "reason": reason,
            "action": action,
            "at": SYSTEM_CLOCK.wall_ms(),
            "reported": False,
        }
        atomic_write(os.path.join(directory, name + ".json"), json.dumps(desc).encode())
    except OSError as exc:
        raise StoreError(f"cannot write the quarantine file {path}: {exc.strerror}") from exc
    log.warning("quarantined commit log bytes [%d, %d) into %s (%s)", start, end, path, reason)
    return path


def filler(start: int, end: int, file_end: int, store_host: tuple[str, int], note: str) -> bytes:
    """Bytes that make ``[start, end)`` a valid, never delivered part of the log: a BLANK when
    the range reaches its file end, else one rolled-back transaction record of the quarantine
    topic whose body pads it to the exact size."""
    size = end - start
    if end == file_end and size >= END_FILE_MIN_BLANK_LENGTH:
        return encode_blank(size) + bytes(size - 8)
    props = {"QUARANTINE": note}
    head = encode_message(Message(QUARANTINE_TOPIC, b"", properties=props), store_host)
    pad = size - len(head)
    if pad < 0:
        raise StoreError(
            f"damaged range [{start}, {end}) is {size} bytes, below the {len(head)} a filler "
            "record needs; restore this node from its replica instead"
        )
    msg = Message(
        QUARANTINE_TOPIC,
        bytes(pad),
        properties=props,
        sysflag=SYSFLAG_TRANSACTION_ROLLBACK,
        born_timestamp=SYSTEM_CLOCK.wall_ms(),
    )
    enc = encode_message(msg, store_host)
    return bytes(enc.stamp(0, start, SYSTEM_CLOCK.wall_ms()))


def fill(queue: MappedFileQueue, start: int, end: int, store_host, note: str) -> None:
    """Overwrite ``[start, end)`` with fillers, one per file it touches, and flush them."""
    offset = start
    while offset < end:
        mf = queue.find(offset)
        if mf is None:
            raise StoreError(f"offset {offset} is outside the commit log")
        stop = min(end, mf.end_offset)
        rel = offset - mf.file_from_offset
        mf.write_at(rel, filler(offset, stop, mf.end_offset, store_host, note))
        mf.buffer.flush()
        offset = stop


def pending_reports(root: str) -> list[dict]:
    """Quarantine descriptions not yet reported as ``recovered`` events."""
    directory = os.path.join(root, QUARANTINE_DIR)
    out = []
    if not os.path.isdir(directory):
        return out
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as fh:
                desc = json.load(fh)
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable quarantine description: %s", path, exc)
            continue
        if isinstance(desc, dict) and not desc.get("reported"):
            out.append({**desc, "file": os.path.join(directory, name[:-5] + ".bin")})
    return out


def mark_reported(root: str, side_file: str) -> None:
    """Note in the side file's description that its ``recovered`` event went out."""
    path = os.path.join(root, QUARANTINE_DIR, os.path.basename(side_file)[: -len(".bin")] + ".json")
    try:
        with open(path, encoding="utf-8") as fh:
            desc = json.load(fh)
        desc["reported"] = True
        atomic_write(path, json.dumps(desc).encode())
    except (OSError, ValueError) as exc:
        log.warning("%s: cannot mark as reported: %s", path, exc)


def damage_dict(d: Damage) -> dict:
    return asdict(d)
