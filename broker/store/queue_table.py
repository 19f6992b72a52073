"""The store's consume queues (RocketMQ's consumeQueueTable, ConsumeQueueStore in 5.x) and the
next queue offset of each (CommitLog's topicQueueTable), a part the store façade owns.

One consume queue per (topic, queueId) under ``consumequeue/{topic}/{queueId}/``, opened on
demand; at start they are loaded, cut back to the commit log's end and brought up to it (or
rebuilt from the whole log when they disagree with it).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable

from broker.store.commit_log import CommitLog
from broker.store.consume_queue import ConsumeQueue
from broker.store.dispatcher import Dispatcher, rebuild_consume_queues
from broker.store.queue_check import describe, heal_tails, rebuild_queues, verify_all
from contracts.errors import StoreError
from contracts.record.model import Record

log = logging.getLogger(__name__)

TagsCode = Callable[[Record], int]


class ConsumeQueueTable:
    def __init__(self, root: str, mapped_file_size: int) -> None:
        self.root = root
        self.mapped_file_size = mapped_file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        # the next queue offset of each queue (RocketMQ CommitLog.topicQueueTable)
        self.next_offsets: dict[tuple[str, int], int] = {}

    def open(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue.load(self.root, topic, queue_id, self.mapped_file_size)

    def get_or_open(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            cq = self.queues[key] = self.open(topic, queue_id)
        return cq

    def load(self) -> None:
        """Open every queue found on disk."""
        if not os.path.isdir(self.root):
            return
        for topic in sorted(os.listdir(self.root)):
            tdir = os.path.join(self.root, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                if qid.lstrip("-").isdigit():
                    self.queues[(topic, int(qid))] = self._open_loaded(topic, int(qid))

    def _open_loaded(self, topic: str, queue_id: int) -> ConsumeQueue:
        """Open a queue found on disk; one with an emptied file is deleted (derived data) and
        flagged for the rebuild ``recover`` does."""
        try:
            return self.open(topic, queue_id)
        except StoreError as exc:
            path = os.path.join(self.root, topic, str(queue_id))
            if not any(e.stat().st_size == 0 for e in os.scandir(path) if e.is_file()):
                raise  # a size that is not the configured one: refuse, as for the log
            log.error("consume queue %s/%d unreadable (%s); rebuilding it", topic, queue_id, exc)
            shutil.rmtree(path, ignore_errors=True)
            cq = self.open(topic, queue_id)
            cq.damage = str(exc)
            return cq

    def recover(
        self,
        commit_log: CommitLog,
        dispatcher: Dispatcher,
        redispatch: list[Record],
        tags_code: TagsCode,
    ) -> None:
        """Cut every queue back to the log end, index ``redispatch`` (a crash's records) and the
        log from the queues' end on; rebuild all from the log when they disagree with it."""
        end = commit_log.max_offset
        for cq in self.queues.values():
            cq.truncate_dirty(end)
        try:
            for rec in redispatch:
                dispatcher.dispatch_record(rec)
            start = max((cq.max_phy_offset for cq in self.queues.values()), default=0)
            dispatcher.dispatched_offset = max(start, commit_log.min_offset)
            dispatcher.dispatch_until(end)
        except StoreError as exc:
            log.warning("consume queues inconsistent with the commit log (%s); rebuilding", exc)
            rebuild_consume_queues(commit_log, self.root, self.queues, self.open, tags_code)
            dispatcher.dispatched_offset = end
        verify_all(commit_log, self.queues, self.open, tags_code)
        heal_tails(commit_log, self.queues, self.open, tags_code)
        for key, cq in self.queues.items():
            self.next_offsets[key] = cq.max_offset_in_queue

    def rebuild(self, commit_log: CommitLog, tags_code: TagsCode) -> int:
        """Delete every queue and index the whole log again; returns the records indexed."""
        n = rebuild_consume_queues(commit_log, self.root, self.queues, self.open, tags_code)
        self.next_offsets.clear()
        self.next_offsets.update({k: cq.max_offset_in_queue for k, cq in self.queues.items()})
        return n

    def rebuild_queue(self, commit_log: CommitLog, key: tuple[str, int], tags_code) -> None:
        """Index one damaged queue again from the commit log (a read met a bad entry)."""
        rebuild_queues(commit_log, self.queues, self.open, {key}, tags_code)
        self.next_offsets[key] = max(
            self.next_offsets.get(key, 0), self.queues[key].max_offset_in_queue
        )

    def damage_handler(self, store):
        """What a read of ``store`` (the façade) calls on a damaged entry: log it and rebuild
        that queue from the commit log under the put lock."""
        commit_log, put_lock, tags_code = store.commit_log, store.put_lock, store._tags_code

        def on_damage(topic: str, queue_id: int, qo: int, fault: str) -> None:
            with put_lock:
                cq = self.queues.get((topic, queue_id))
                where = describe(cq, qo) if cq else f"consume queue {topic}/{queue_id}"
                log.error("%s: %s; rebuilding it from the commit log", where, fault)
                self.rebuild_queue(commit_log, (topic, queue_id), tags_code)

        return on_damage

    def truncate_dirty(self, offset: int) -> None:
        """Drop every entry pointing at or above commit log ``offset``."""
        for key, cq in self.queues.items():
            cq.truncate_dirty(offset)
            self.next_offsets[key] = cq.max_offset_in_queue

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
