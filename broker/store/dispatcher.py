"""Commit log → consume queues (RocketMQ's ReputMessageService, run on demand).

Local appends index their own entry under the put lock; this dispatcher covers everything else:
bytes a slave received from its master, recovery after a crash, and a full rebuild from the
commit log alone. It only dispatches complete records: a record whose bytes have not all
arrived yet (replication batches are not record aligned) waits for the next call.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable

from broker.store.commit_log import CommitLog
from broker.store.consume_queue import ConsumeQueue
from contracts.errors import StoreError
from contracts.record.layout import (
    MAGICS,
    PREFIX,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from contracts.record.model import Record
from contracts.record.properties import tags_hash_code
from contracts.record.reader import decode_record

log = logging.getLogger(__name__)

_TRAN_MASK = 0xC


def dispatchable(rec: Record) -> bool:
    """Prepared and rolled-back transaction messages are not consumable (not indexed)."""
    tran = rec.sysflag & _TRAN_MASK
    return tran not in (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)


def tags_code_of(rec: Record) -> int:
    return tags_hash_code(rec.tags)


class Dispatcher:
    def __init__(
        self,
        commit_log: CommitLog,
        queue_for: Callable[[str, int], ConsumeQueue],
        tags_code: Callable[[Record], int] = tags_code_of,
    ):
        self.commit_log = commit_log
        self.queue_for = queue_for
        self.tags_code = tags_code
        self.dispatched_offset = commit_log.min_offset

    def dispatch_record(self, rec: Record) -> None:
        if rec.is_blank or not dispatchable(rec):
            return
        cq = self.queue_for(rec.topic, rec.queue_id)
        cq.put(rec.queue_offset, rec.physical_offset, rec.total_size, self.tags_code(rec))

    def dispatch_until(self, end: int | None = None) -> list[tuple[str, int, int]]:
        """Index complete records in [dispatched_offset, end); returns touched (topic, qid, qo)."""
        stop = self.commit_log.max_offset if end is None else end
        touched: dict[tuple[str, int], int] = {}
        queue = self.commit_log.queue
        offset = self.dispatched_offset
        while offset < stop:
            mf = queue.find(offset)
            if mf is None:
                # the log starts later than the dispatch point (a slave fed from the last file)
                if queue.files and offset < queue.min_offset:
                    offset = queue.min_offset
                    continue
                break
            rel = offset - mf.file_from_offset
            limit = min(mf.wrote_position, stop - mf.file_from_offset)
            if limit - rel < 8:
                break
            total, magic = PREFIX.unpack_from(mf.buffer, rel)
            if magic in MAGICS and 0 < total and rel + total > limit:
                break  # incomplete: wait for the rest
            rec = decode_record(
                mf.buffer, rel, base_offset=mf.file_from_offset, limit=limit, source=mf.path
            )
            self.dispatch_record(rec)
            if not rec.is_blank:
                touched[(rec.topic, rec.queue_id)] = rec.queue_offset + 1
            offset = rec.end
        self.dispatched_offset = offset
        return [(t, q, qo) for (t, q), qo in touched.items()]


def rebuild_consume_queues(
    commit_log: CommitLog,
    cq_root: str,
    queues: dict[tuple[str, int], ConsumeQueue],
    open_queue: Callable[[str, int], ConsumeQueue],
    tags_code: Callable[[Record], int] = tags_code_of,
) -> int:
    """Delete every consume queue and index the whole commit log again; returns records indexed."""
    for cq in queues.values():
        cq.destroy()
    queues.clear()
    if os.path.isdir(cq_root):
        shutil.rmtree(cq_root)
    os.makedirs(cq_root, exist_ok=True)

    def queue_for(topic: str, qid: int) -> ConsumeQueue:
        key = (topic, qid)
        if key not in queues:
            queues[key] = open_queue(topic, qid)
        return queues[key]

    d = Dispatcher(commit_log, queue_for, tags_code)
    count = 0
    for rec in commit_log.iter_records(commit_log.min_offset):
        if not rec.is_blank:
            try:
                d.dispatch_record(rec)
            except StoreError as exc:
                raise StoreError(
                    f"rebuilding consume queues at {rec.physical_offset}: {exc}"
                ) from exc
            count += 1
    log.info("rebuilt %d consume queues from %d records", len(queues), count)
    return count
