"""ConsumerOffsetManager (RocketMQ's name): every committed consumer offset of a node.

One owner for what used to be spread over the node: client commits (forward-only, never beyond
the queue's max offset), queries, the slave's copy of its master's table and the master's reverse
sync from its peers (both forward-only merges), the admin reset (the one way back, told to the
reset listeners so the archive records an ``offset_reset`` event) and persistence.

``config/consumerOffset.json`` stays RocketMQ's document (``offsetTable`` keyed ``topic@group``,
``dataVersion``) with two more fields fastjson ignores: ``generation`` (one more at every write)
and ``checksum`` (sha256 of the canonical table and generation). Every write goes to the file and
then, the same bytes, to ``consumerOffset.json.bak``, each atomically (temp file, fsync, rename).
At load the newest valid copy wins; a file that exists but is unreadable or fails its checksum,
with no verified copy beside it, stops the node (:class:`OffsetsUnreadableError`) instead of
serving an older or empty table, unless the operator accepts the loss (``--accept-offset-loss``,
then recorded in :attr:`ConsumerOffsetManager.accepted_loss` for an ``offset_reset`` event).
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.store.checkpoint import atomic_write
from broker.store.config_store import new_data_version
from contracts.errors import CorruptFileError, StoreError
from contracts.fastjson import loads_fastjson

log = logging.getLogger(__name__)

FILE_NAME = "consumerOffset.json"

# (group, topic, queue_id, old_offset, new_offset)
Raised = tuple[str, str, int, int, int]
# (group, topic, queue_id, from_offset, to_offset): an explicit rewind
ResetListener = Callable[[str, str, int, int, int], None]


class OffsetsUnreadableError(StoreError):
    """The committed offsets cannot be read and no verified copy exists: starting would serve
    older (or no) offsets and make consumers read again what they had consumed."""

    def __init__(self, path: str, problems: list[str], restore_hint: str = "") -> None:
        text = "; ".join(problems)
        hint = f" Restore from {restore_hint}," if restore_hint else " Restore it,"
        super().__init__(
            f"{path}: committed consumer offsets unreadable ({text}); refusing to start with "
            f"older or empty offsets.{hint} or start with --accept-offset-loss to serve what is "
            "left (recorded as an offset_reset event)"
        )
        self.path = path
        self.problems = problems


class OffsetOutOfRangeError(StoreError):
    """A commit above the queue's max offset (a consumer cannot have consumed it)."""


class Commit(enum.Enum):
    STORED = "stored"  # the committed offset is now this one
    KEPT_LARGER = "kept_larger"  # below the committed offset: ignored (no-regression rule)


@dataclass(frozen=True, slots=True)
class _Copy:
    path: str
    generation: int  # -1: a document without checksum (RocketMQ's, or written before them)
    verified: bool
    doc: dict[str, Any]


def checksum_of(table: dict[str, dict[str, int]], generation: int) -> str:
    canonical = json.dumps(
        {"generation": generation, "offsetTable": table}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def parse_table(doc: dict[str, Any], source: str) -> dict[str, dict[int, int]]:
    """``offsetTable`` as {topic@group: {queue: offset}}; CorruptFileError naming the entry."""
    table = doc.get("offsetTable", {})
    if not isinstance(table, dict):
        raise CorruptFileError(source, "offsetTable is not an object")
    out: dict[str, dict[int, int]] = {}
    for key, queues in table.items():
        if "@" not in key or not isinstance(queues, dict):
            raise CorruptFileError(source, f"offsetTable entry {key!r} is not topic@group")
        try:
            out[key] = {int(q): int(o) for q, o in queues.items()}
        except (TypeError, ValueError) as exc:
            raise CorruptFileError(source, f"offsetTable[{key!r}]: {exc}") from exc
        if any(o < -1 or q < 0 for q, o in out[key].items()):
            raise CorruptFileError(source, f"offsetTable[{key!r}]: negative queue or offset")
    return out


def _log_position(doc: dict[str, Any]) -> tuple[int, int]:
    """``(logOffset, logQueueOffset)`` of a checkpoint (0, 0 when absent or not integers)."""
    pos = (doc.get("logOffset", 0), doc.get("logQueueOffset", 0))
    ok = all(type(v) is int and v >= 0 for v in pos)
    return pos if ok else (0, 0)


def _read_copy(path: str) -> _Copy | None:
    """One copy of the file: None when absent; CorruptFileError when present but unusable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptFileError(path, f"cannot read: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"not UTF-8 at byte {exc.start}") from exc
    if not text.strip():
        raise CorruptFileError(path, "empty")
    doc = loads_fastjson(text, path)
    if not isinstance(doc, dict):
        raise CorruptFileError(path, "expected a JSON object at the top level")
    table = parse_table(doc, path)
    if "checksum" not in doc:
        return _Copy(path, -1, False, doc)
    generation = doc.get("generation")
    if not isinstance(generation, int) or generation < 0:
        raise CorruptFileError(path, f"generation {generation!r} is not a count")
    strict = {k: {str(q): o for q, o in v.items()} for k, v in table.items()}
    if doc["checksum"] != checksum_of(strict, generation):
        raise CorruptFileError(path, f"checksum mismatch (generation {generation})")
    return _Copy(path, generation, True, doc)


class ConsumerOffsetManager:
    """Create with :meth:`load`; ``max_offset_of(topic, queue_id)`` bounds client commits."""

    def __init__(self, path: str, max_offset_of: Callable[[str, int], int] | None = None):
        self.path = path
        self.max_offset_of = max_offset_of
        self.table: dict[str, dict[int, int]] = {}
        self.data_version = new_data_version()
        self.generation = 0
        self.reset_listeners: list[ResetListener] = []
        self.accepted_loss: str | None = None  # why, when started with --accept-offset-loss
        self.fresh = False  # loaded from no file at all: a new store
        self.refused_commits = 0
        # offsetCommitThroughLog (broker/offset_log): (logOffset, logQueueOffset) after the last
        # record of the offsets topic applied; persisted, so a restart replays only what follows
        self.log_position: tuple[int, int] = (0, 0)
        self._changes = 0  # table changes so far; persist() remembers the count it wrote
        self._persisted_changes = -1
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()

    # -- loading -------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        path: str,
        *,
        max_offset_of: Callable[[str, int], int] | None = None,
        accept_offset_loss: bool = False,
        restore_hint: str = "",
        holds_messages: bool = False,
    ) -> ConsumerOffsetManager:
        """The newest valid of the file and its ``.bak``. An unusable copy with no verified one
        beside it, or both copies missing while the store ``holds_messages`` (a store writes
        its file when it is created), raises :class:`OffsetsUnreadableError` unless
        ``accept_offset_loss``."""
        m = cls(path, max_offset_of)
        copies: list[_Copy] = []
        problems: list[str] = []
        for candidate in (path, path + ".bak"):
            try:
                copy = _read_copy(candidate)
            except CorruptFileError as exc:
                problems.append(f"{os.path.basename(candidate)}: {exc.reason}")
                continue
            if copy is not None:
                copies.append(copy)
        if not copies and not problems and holds_messages:
            problems.append(
                f"{os.path.basename(path)} and its .bak are both missing, but the store holds "
                "messages (every offset would start again)"
            )
        m.fresh = not copies and not problems
        verified = [c for c in copies if c.verified]
        best = max(verified, key=lambda c: c.generation) if verified else None
        main = next((c for c in copies if c.path == path), None)
        if best is None and main is not None:
            best = main  # RocketMQ's own file (no checksum), readable: a backup is never newer
        if problems:
            if best is not None:
                log.warning(
                    "%s: %s; using %s (generation %d, written with the same content)",
                    path, "; ".join(problems), best.path, best.generation,
                )  # fmt: skip
            elif not accept_offset_loss:
                raise OffsetsUnreadableError(path, problems, restore_hint)
            else:
                best = copies[0] if copies else None
                source = best.path if best is not None else "an empty table"
                m.accepted_loss = f"{'; '.join(problems)}; started from {source}"
                log.error(
                    "%s: committed offsets unreadable (%s); --accept-offset-loss: serving %s",
                    path, "; ".join(problems), source,
                )  # fmt: skip
        if best is not None:
            m.table = parse_table(best.doc, best.path)
            m.log_position = _log_position(best.doc)
            m.generation = max(best.generation, 0)
            if isinstance(best.doc.get("dataVersion"), dict):
                m.data_version = best.doc["dataVersion"]
        return m

    # -- reading -------------------------------------------------------------------------------

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when none."""
        return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def groups(self) -> set[str]:
        return {key.partition("@")[2] for key in self.table}

    def topics_of(self, group: str) -> set[str]:
        return {t for t, _, g in (k.partition("@") for k in self.table) if g == group}

    def queues_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}@{group}", {}))

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's document (strict JSON: string queue ids)."""
        with self._lock:
            table = {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}
        return {"offsetTable": table, "dataVersion": self.data_version}

    # -- commits -------------------------------------------------------------------------------

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> Commit:
        """A client's commit. Below the committed offset it is ignored (offsets never move
        back but by :meth:`reset`); above the queue's max offset it raises
        :class:`OffsetOutOfRangeError` and changes nothing."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset} for {group} on {topic}/{queue_id}")
        if self.max_offset_of is not None:
            top = self.max_offset_of(topic, queue_id)
            if offset > top:
                self.refused_commits += 1
                raise OffsetOutOfRangeError(
                    f"commit of {group} on {topic}/{queue_id} at {offset} is beyond the "
                    f"queue's max offset {top}"
                )
        return (
            Commit.STORED if self._raise_to(group, topic, queue_id, offset) else Commit.KEPT_LARGER
        )

    def _raise_to(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        with self._lock:
            queues = self.table.setdefault(f"{topic}@{group}", {})
            before = queues.get(queue_id, -1)
            if offset < before:
                return False
            if offset != before:
                queues[queue_id] = offset
                self._changes += 1
            return True

    def apply_logged(self, group: str, topic: str, queue_id: int, offset: int, reset: bool) -> None:
        """An offset record of the log (broker/offset_log): a commit raises, a reset sets."""
        if not reset:
            self._raise_to(group, topic, queue_id, offset)
            return
        with self._lock:
            queues = self.table.setdefault(f"{topic}@{group}", {})
            if queues.get(queue_id) != offset:
                queues[queue_id] = offset
                self._changes += 1

    def merge_forward(self, doc: dict[str, Any], source: str = "<peer>") -> list[Raised]:
        """Take a peer's ``GET_ALL_CONSUMER_OFFSET`` document forward-only (a slave copying its
        master, a master's reverse sync from its peers); returns what rose. Raises ValueError
        naming the entry when the document is malformed (nothing is changed then)."""
        try:
            peer = parse_table(doc, source)
        except CorruptFileError as exc:
            raise ValueError(exc.reason) from exc
        raised: list[Raised] = []
        for key, queues in peer.items():
            topic, _, group = key.partition("@")
            for queue_id, offset in queues.items():
                before = self.query(group, topic, queue_id)
                if offset > before and self._raise_to(group, topic, queue_id, offset):
                    raised.append((group, topic, queue_id, before, offset))
        return raised

    def reset(self, group: str, topic: str, queue_id: int, offset: int) -> int:
        """The explicit rewind (admin): set, persist, tell the reset listeners; returns the
        previous offset."""
        with self._lock:
            queues = self.table.setdefault(f"{topic}@{group}", {})
            before = queues.get(queue_id, -1)
            queues[queue_id] = offset
            self._changes += 1
        self.persist()
        log.warning(
            "admin reset of %s %s/%d: committed offset %d -> %d",
            group, topic, queue_id, before, offset,
        )  # fmt: skip
        self.notify_reset(group, topic, queue_id, before, offset)
        return before

    def notify_reset(self, group: str, topic: str, queue_id: int, before: int, after: int) -> None:
        for listener in list(self.reset_listeners):
            try:
                listener(group, topic, queue_id, before, after)
            except Exception:
                log.exception("offset-reset listener %r failed", listener)

    def beyond_queues(self) -> list[tuple[str, str, int, int, int]]:
        """(group, topic, queue, committed, queue max) where a committed offset is above its
        queue's max offset (the log lost its tail since): reported, never lowered."""
        if self.max_offset_of is None:
            return []
        out = []
        for key, queues in list(self.table.items()):
            topic, _, group = key.partition("@")
            for queue_id, offset in queues.items():
                top = self.max_offset_of(topic, queue_id)
                if offset > top:
                    out.append((group, topic, queue_id, offset, top))
        return out

    # -- persistence ---------------------------------------------------------------------------

    async def persist_periodically(self, interval_ms: int) -> None:
        """The node's flush loop (flushConsumerOffsetInterval): write after changes; a failing
        write is logged once when it starts failing and once when it works again."""
        import asyncio

        last_error = None
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                self.persist_if_changed()  # a small file: cheap enough inline
            except OSError as exc:
                error = f"{exc.filename or self.path}: {exc.strerror}"
                if error != last_error:
                    log.error("persisting committed offsets failed (retrying): %s", error)
                last_error = error
                continue
            if last_error is not None:
                log.warning("persisting committed offsets works again")
                last_error = None

    def persist_if_changed(self) -> bool:
        """:meth:`persist` when the table changed since the last write (the periodic flush)."""
        if self._changes == self._persisted_changes and os.path.exists(self.path):
            return False
        self.persist()
        return True

    def persist(self) -> None:
        """Write the table (one generation more) to the file, then the same bytes to ``.bak``."""
        with self._persist_lock:
            position = self.log_position  # read first: never ahead of the table written
            with self._lock:
                table = {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}
                changes = self._changes
            generation = self.generation + 1
            data_version = {
                "counter": int(self.data_version.get("counter", 0)) + 1,
                "timestamp": int(time.time() * 1000),
            }
            doc = {
                "offsetTable": table,
                "dataVersion": data_version,
                "generation": generation,
                "checksum": checksum_of(table, generation),
            }
            if position != (0, 0):
                doc["logOffset"], doc["logQueueOffset"] = position
            data = json.dumps(doc, indent="\t").encode()
            atomic_write(self.path, data)
            atomic_write(self.path + ".bak", data)
            self.generation = generation
            self.data_version = data_version
            self._persisted_changes = changes
