"""The store's consume queues (RocketMQ's consumeQueueTable, ConsumeQueueStore in 5.x) and the
next queue offset of each (CommitLog's topicQueueTable), a part the store façade owns.

One consume queue per (topic, queueId) under ``consumequeue/{topic}/{queueId}/``, opened on
demand; at start they are loaded, cut back to the commit log's end and brought up to it (or
rebuilt from the whole log when they disagree with it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from broker.store.commit_log import CommitLog
from broker.store.consume_queue import ConsumeQueue
from broker.store.dispatcher import Dispatcher, rebuild_consume_queues
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
                    self.queues[(topic, int(qid))] = self.open(topic, int(qid))

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
        for key, cq in self.queues.items():
            self.next_offsets[key] = cq.max_offset_in_queue

    def rebuild(self, commit_log: CommitLog, tags_code: TagsCode) -> int:
        """Delete every queue and index the whole log again; returns the records indexed."""
        n = rebuild_consume_queues(commit_log, self.root, self.queues, self.open, tags_code)
        self.next_offsets.clear()
        self.next_offsets.update({k: cq.max_offset_in_queue for k, cq in self.queues.items()})
        return n

    def truncate_dirty(self, offset: int) -> None:
        """Drop every entry pointing at or above commit log ``offset``."""
        for key, cq in self.queues.items():
            cq.truncate_dirty(offset)
            self.next_offsets[key] = cq.max_offset_in_queue

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
