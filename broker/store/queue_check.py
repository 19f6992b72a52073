"""Consume queue verification against the commit log (issue #28).

A consume queue is derived data: every entry must point at a record of the queue's topic and
queue id whose queue offset is the entry's. A queue that breaks this is never served: it is
rebuilt from the commit log (one log line naming the file and the entry) and read again.

Start-up cost: a queue is not read in full. Each queue is checked at its head, its last
``TAIL`` entries (where a crash or a torn write leaves damage), and ``SAMPLES`` entries spread
evenly over the rest: O(queues * (TAIL + SAMPLES)) record decodes however large the store.
Damage the sample misses is caught on read, where every served entry is checked (the record it
points at is decoded anyway). Loading also flags a queue whose empty file was removed or whose
last file holds bytes past the first all-zero entry (zeroed entries in the middle).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.store.commit_log import CommitLog
from broker.store.consume_queue import ENTRY_SIZE, ConsumeQueue
from broker.store.dispatcher import Dispatcher, dispatchable
from contracts.errors import StoreError
from contracts.record.layout import SYSFLAG_TRANSACTION_ROLLBACK
from contracts.record.model import Record

log = logging.getLogger(__name__)

TAIL = 16
SAMPLES = 16

OpenQueue = Callable[[str, int], ConsumeQueue]


def entry_fault(
    commit_log: CommitLog, cq: ConsumeQueue, qo: int, entry: tuple[int, int, int] | None
) -> str | None:
    """Why the entry at ``qo`` is bad, or None when it points at its own record."""
    if entry is None:
        return "missing entry"
    phy, size, _ = entry
    if size <= 0 or phy < 0:
        return f"entry ({phy}, {size}) is not a record position"
    if phy < commit_log.min_offset or phy + size > commit_log.max_offset:
        return (
            f"entry ({phy}, {size}) lies outside the commit log "
            f"[{commit_log.min_offset}, {commit_log.max_offset})"
        )
    try:
        rec = commit_log.lookup(phy)
    except Exception as exc:  # noqa: BLE001 - any decode failure means no record there
        return f"no record at commit log offset {phy} ({exc})"
    if rec.sysflag & SYSFLAG_TRANSACTION_ROLLBACK == SYSFLAG_TRANSACTION_ROLLBACK:
        return None  # a range a repair quarantined (store/recovery.py): reads skip it
    return record_fault(cq, qo, phy, size, rec)


def record_fault(cq: ConsumeQueue, qo: int, phy: int, size: int, rec: Record) -> str | None:
    if rec.is_blank or (rec.topic, rec.queue_id, rec.queue_offset, rec.total_size) != (
        cq.topic,
        cq.queue_id,
        qo,
        size,
    ):
        return (
            f"commit log offset {phy} holds {rec.topic}/{rec.queue_id} queue offset "
            f"{rec.queue_offset} ({rec.total_size} bytes), not this entry's record"
        )
    return None


def describe(cq: ConsumeQueue, qo: int) -> str:
    """The file and entry a log line names."""
    mf = cq.files.find(qo * ENTRY_SIZE)
    where = mf.path if mf is not None else cq.files.directory
    return f"consume queue {cq.topic}/{cq.queue_id} ({where}) entry {qo}"


def _positions(lo: int, hi: int) -> list[int]:
    if hi <= lo:
        return []
    picks = set(range(max(lo, hi - TAIL), hi)) | {lo}
    step = max(1, (hi - lo) // SAMPLES)
    picks |= set(range(lo, hi, step))
    return sorted(picks)


def verify_queue(commit_log: CommitLog, cq: ConsumeQueue) -> str | None:
    """A reason naming the file and entry when ``cq`` is damaged, else None (sampled)."""
    if cq.damage:
        return f"consume queue {cq.topic}/{cq.queue_id} ({cq.files.directory}): {cq.damage}"
    for qo in _positions(cq.min_offset_in_queue, cq.max_offset_in_queue):
        entry = cq.get(qo)
        if entry is not None and 0 <= entry[0] < commit_log.min_offset and entry[1] > 0:
            continue  # its record was cleaned up with the log's head
        fault = entry_fault(commit_log, cq, qo, entry)
        if fault:
            return f"{describe(cq, qo)}: {fault}"
    return None


def rebuild_queues(
    commit_log: CommitLog,
    queues: dict[tuple[str, int], ConsumeQueue],
    open_queue: OpenQueue,
    keys: set[tuple[str, int]],
    tags_code: Callable[[Record], int],
) -> None:
    """Delete the queues ``keys`` and index them again from the whole commit log (one scan)."""
    for key in keys:
        old = queues.pop(key, None)
        if old is not None:
            old.destroy()
        queues[key] = open_queue(*key)
        queues[key].damage = None

    def queue_for(topic: str, qid: int) -> ConsumeQueue:
        return queues[(topic, qid)]

    d = Dispatcher(commit_log, queue_for, tags_code)
    for rec in commit_log.iter_records(commit_log.min_offset):
        if not rec.is_blank and (rec.topic, rec.queue_id) in keys and dispatchable(rec):
            try:
                d.dispatch_record(rec)
            except StoreError as exc:  # a record the log lost (quarantined): not indexable
                log.error("rebuilding consume queue %s/%d: %s", rec.topic, rec.queue_id, exc)
    for key in keys:
        cq = queues[key]
        log.warning(
            "consume queue %s/%d rebuilt from the commit log: %d entries [%d, %d)",
            key[0],
            key[1],
            cq.max_offset_in_queue - cq.min_offset_in_queue,
            cq.min_offset_in_queue,
            cq.max_offset_in_queue,
        )


def verify_all(
    commit_log: CommitLog,
    queues: dict[tuple[str, int], ConsumeQueue],
    open_queue: OpenQueue,
    tags_code: Callable[[Record], int],
) -> set[tuple[str, int]]:
    """Start-up check of every queue; damaged ones are logged and rebuilt. Returns their keys."""
    damaged: set[tuple[str, int]] = set()
    for key, cq in list(queues.items()):
        reason = verify_queue(commit_log, cq)
        if reason:
            log.error("%s; rebuilding it from the commit log", reason)
            damaged.add(key)
    if damaged:
        rebuild_queues(commit_log, queues, open_queue, damaged, tags_code)
    return damaged


TAIL_WINDOW = 1 << 20  # commit log bytes re-read at start-up to find queues missing their tail


def heal_tails(
    commit_log: CommitLog,
    queues: dict[tuple[str, int], ConsumeQueue],
    open_queue: OpenQueue,
    tags_code: Callable[[Record], int],
) -> None:
    """Find queues whose last entries were lost (zeroed or cut): read the commit log again from
    the earliest verified queue tail within ``TAIL_WINDOW`` of the log end and index what a
    queue lacks; a queue the window cannot complete is rebuilt. Bounded: one window of log."""
    end = commit_log.max_offset
    tails = [cq.max_phy_offset for cq in queues.values() if cq.max_offset_in_queue > 0]
    near = [t for t in tails if end - TAIL_WINDOW <= t <= end and t >= commit_log.min_offset]
    if not near:
        return
    before = {k: cq.max_offset_in_queue for k, cq in queues.items()}
    d = Dispatcher(commit_log, lambda t, q: queues[(t, q)], tags_code)
    broken: set[tuple[str, int]] = set()
    for rec in commit_log.iter_records(min(near), end):
        key = (rec.topic, rec.queue_id)
        if rec.is_blank or key in broken or not dispatchable(rec):
            continue
        if key not in queues:
            broken.add(key)  # a whole queue is missing
            continue
        try:
            d.dispatch_record(rec)
        except StoreError as exc:
            log.error("consume queue %s/%d: %s", key[0], key[1], exc)
            broken.add(key)
    for key, cq in queues.items():
        if key not in broken and cq.max_offset_in_queue > before[key]:
            log.error(
                "%s: entries [%d, %d) were missing; indexed again from the commit log",
                describe(cq, before[key]),
                before[key],
                cq.max_offset_in_queue,
            )
    if broken:
        rebuild_queues(commit_log, queues, open_queue, broken, tags_code)
