"""The topic change log beside ``topics.json`` (``topics.json.log``): what changed since the
checkpoint, appended and fsynced per change, so a new topic costs one small record and not a
rewrite of every topic. Written only by ``TopicConfigManager`` (``broker/store/topic_configs.py``).

Not in RocketMQ (its TopicConfigManager rewrites ``topics.json`` at every change). The file::

    record*  with record = [u32 payload length][u32 crc32 of the payload][payload: JSON]

The first record is ``{"base": dataVersion}``: the dataVersion of the checkpoint (the
``topics.json`` written by the same compaction) the log extends. Each further record is
``{"op": "put", "topic", "config", "dataVersion"}`` or ``{"op": "delete", "topic",
"dataVersion"}``, the table's dataVersion after the change. Replaying a record sets or removes
one topic, so replaying records a checkpoint already holds changes nothing: after a crash
between a compaction's two steps the log's last record carries the checkpoint's dataVersion and
only the records after it are replayed (``replay``).

A record cut short at the end (a crash inside an append, never acknowledged: the append
returns after fsync) is dropped with a WARNING and the log rewritten by a compaction; a bad
record with data after it is damage: ``CorruptFileError`` names the file and the offset.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

from broker.store.checkpoint import atomic_write
from contracts.errors import CorruptFileError
from contracts.fastjson import loads_fastjson

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">II")  # payload length, crc32 of the payload
MAX_RECORD_BYTES = 1 << 20  # one topic's config: far below; a longer length is damage
MAX_LOG_BYTES = 1 << 30  # read at most this much of a log (compaction keeps it far smaller)


def encode_record(doc: dict[str, Any]) -> bytes:
    payload = json.dumps(doc, separators=(",", ":")).encode()
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


@dataclass
class LogContents:
    """A log as read: the checkpoint's dataVersion it extends, its change records, and the
    offset of a torn tail dropped (None when it ended cleanly)."""

    base: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    torn_at: int | None = None


def read_log(path: str) -> LogContents | None:
    """The log at ``path``; None when there is none."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_LOG_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptFileError(path, f"cannot read the topic change log: {exc}") from exc
    if len(data) > MAX_LOG_BYTES:
        raise CorruptFileError(path, f"topic change log over {MAX_LOG_BYTES} bytes")
    docs: list[dict[str, Any]] = []
    pos, torn_at = 0, None
    while pos < len(data):
        doc, end = _record_at(data, pos, path)
        if doc is None:
            torn_at = pos
            break
        docs.append(doc)
        pos = end
    if not docs or not isinstance(docs[0].get("base"), dict):
        raise CorruptFileError(path, "the topic change log does not start with its base record")
    if torn_at is not None:
        log.warning(
            "%s: a record cut short at byte %d (a crash inside an append, never acknowledged): "
            "dropped, %d bytes",
            path,
            torn_at,
            len(data) - torn_at,
        )
    return LogContents(docs[0]["base"], docs[1:], torn_at)


def _record_at(data: bytes, pos: int, path: str) -> tuple[dict[str, Any] | None, int]:
    """(the record at ``pos``, where the next starts); (None, pos) for a torn tail."""
    if len(data) - pos < _HEAD.size:
        return _torn(data, pos, path, "a record header cut short")
    length, crc = _HEAD.unpack_from(data, pos)
    end = pos + _HEAD.size + length
    if length == 0 or length > MAX_RECORD_BYTES:
        return _torn(data, pos, path, f"record length {length}")
    if end > len(data):
        return _torn(data, pos, path, "a record cut short")
    payload = data[pos + _HEAD.size : end]
    if zlib.crc32(payload) != crc:
        return _torn(data, pos, path, "checksum mismatch")
    try:
        doc = loads_fastjson(payload, f"{path} at byte {pos}")
    except ValueError as exc:
        raise CorruptFileError(path, f"topic change record at byte {pos}: {exc}") from exc
    if not isinstance(doc, dict):
        raise CorruptFileError(path, f"topic change record at byte {pos}: not an object")
    return doc, end


def _torn(data: bytes, pos: int, path: str, what: str) -> tuple[None, int]:
    """A bad record is a torn tail (the last append, cut short by a crash) when no good
    record follows it; otherwise it is damage, and records after it would be lost."""
    for later in range(pos + 1, len(data) - _HEAD.size):
        length, crc = _HEAD.unpack_from(data, later)
        end = later + _HEAD.size + length
        if 0 < length <= MAX_RECORD_BYTES and end <= len(data):
            if zlib.crc32(data[later + _HEAD.size : end]) == crc:
                raise CorruptFileError(
                    path,
                    f"topic change record at byte {pos}: {what}, with a good record at byte "
                    f"{later} after it (damage, not a torn tail)",
                )
    return None, pos


def replay(
    table: dict[str, dict[str, Any]],
    version: dict[str, Any],
    contents: LogContents,
    path: str,
) -> tuple[dict[str, Any], int]:
    """Apply to ``table`` (the checkpoint's, with its dataVersion ``version``) the records of
    ``contents`` it does not hold yet; (the dataVersion after them, how many were applied)."""
    records = contents.records
    start = 0
    if version != contents.base:
        versions = [r.get("dataVersion") for r in records]
        if version in versions:
            start = len(versions) - versions[::-1].index(version)
        else:
            log.warning(
                "%s: the checkpoint's dataVersion %s is neither the log's base %s nor one of its "
                "records: replaying all %d records over it",
                path,
                version,
                contents.base,
                len(records),
            )
    for i, rec in enumerate(records[start:], start):
        topic, op = rec.get("topic"), rec.get("op")
        if not isinstance(topic, str) or not isinstance(rec.get("dataVersion"), dict):
            raise CorruptFileError(path, f"topic change record {i + 1}: no topic or dataVersion")
        if op == "put" and isinstance(rec.get("config"), dict):
            table[topic] = rec["config"]
        elif op == "delete":
            table.pop(topic, None)
        else:
            raise CorruptFileError(path, f"topic change record {i + 1}: unknown op {op!r}")
        version = rec["dataVersion"]
    return version, len(records) - start


class TopicChangeLog:
    """The open log: ``append`` one record (fsynced before it returns), ``reset`` to a new log
    holding only its base record (atomically: temp file, fsync, rename, directory fsync)."""

    def __init__(self, path: str, *, exists: bool) -> None:
        self.path = path
        self.records = 0  # change records since the base
        self._exists = exists
        self._lock = threading.Lock()
        self._fd: int | None = None

    def exists(self) -> bool:
        return self._exists

    def append(self, doc: dict[str, Any]) -> None:
        data = encode_record(doc)
        with self._lock:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
            self.records += 1

    def reset(self, base: dict[str, Any]) -> None:
        with self._lock:
            self._close()
            atomic_write(self.path, encode_record({"base": base}))
            self.records = 0
            self._exists = True

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
