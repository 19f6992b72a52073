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
import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from broker.clock import SYSTEM_CLOCK, Clock
from broker.store.checkpoint import atomic_write
from broker.store.config_store import new_data_version
from broker.store.offset_file import (
    OffsetsCopy,
    checksum_of,
    log_position,
    parse_table,
    read_copy,
)
from contracts.errors import CorruptFileError, StoreError

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
        self._persist_error: str | None = None  # the periodic write's last failure, if failing

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
        copies: list[OffsetsCopy] = []
        problems: list[str] = []
        for candidate in (path, path + ".bak"):
            try:
                copy = read_copy(candidate)
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
                    path,
                    "; ".join(problems),
                    best.path,
                    best.generation,
                )
            elif not accept_offset_loss:
                raise OffsetsUnreadableError(path, problems, restore_hint)
            else:
                best = copies[0] if copies else None
                source = best.path if best is not None else "an empty table"
                m.accepted_loss = f"{'; '.join(problems)}; started from {source}"
                log.error(
                    "%s: committed offsets unreadable (%s); --accept-offset-loss: serving %s",
                    path,
                    "; ".join(problems),
                    source,
                )
        if best is not None:
            m.table = parse_table(best.doc, best.path)
            m.log_position = log_position(best.doc)
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
            group,
            topic,
            queue_id,
            before,
            offset,
        )
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

    async def persist_periodically(self, interval_ms: int, clock: Clock = SYSTEM_CLOCK) -> None:
        """:meth:`persist_round` every ``interval_ms`` of ``clock``, for ever (a node runs the
        rounds on its own loop service instead)."""
        while True:
            await clock.sleep_ms(interval_ms)
            await self.persist_round()

    async def persist_round(self) -> None:
        """One round of the node's flush loop (flushConsumerOffsetInterval): write after
        changes; a failing write is logged once when it starts failing and once when it works
        again."""
        try:
            self.persist_if_changed()  # a small file: cheap enough inline
        except OSError as exc:
            error = f"{exc.filename or self.path}: {exc.strerror}"
            if error != self._persist_error:
                log.error("persisting committed offsets failed (retrying): %s", error)
            self._persist_error = error
            return
        if self._persist_error is not None:
            log.warning("persisting committed offsets works again")
            self._persist_error = None

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
                "timestamp": SYSTEM_CLOCK.wall_ms(),
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
