"""Read side of the store, a part its façade owns (:class:`StoreQueries`): pulls, queue offsets, lookups (RocketMQ getMessage & co)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.store.queue_check import record_fault
from broker.store.results import GetMessageResult, GetMessageStatus
from contracts.record.layout import OFFSET_BORNHOST, OFFSET_SYSFLAG, SYSFLAG_TRANSACTION_ROLLBACK
from contracts.record.reader import decode_record

if TYPE_CHECKING:
    from broker.store.commit_log import CommitLog
    from broker.store.consume_queue import ConsumeQueue
    from broker.store.dispatcher import Dispatcher

_TS_OFFSET = OFFSET_BORNHOST  # store timestamp follows the born host
_SYSFLAG = slice(OFFSET_SYSFLAG, OFFSET_SYSFLAG + 4)
_ROLLBACK = SYSFLAG_TRANSACTION_ROLLBACK

log = logging.getLogger(__name__)


class StoreQueries:
    """The store's read side, a part the façade owns: reads the commit log, its consume queues
    (the façade's dict, the same object) and the dispatcher; ``put_lock`` waits out an append."""

    def __init__(
        self,
        commit_log: CommitLog,
        queues: dict[tuple[str, int], ConsumeQueue],
        dispatcher: Dispatcher,
        put_lock: threading.Lock,
    ) -> None:
        self.commit_log = commit_log
        self.queues = queues
        self.dispatcher = dispatcher
        self.put_lock = put_lock
        # rebuilds a damaged queue from the commit log (the façade's, under the put lock)
        self.on_damage: Callable[[str, int, int, str], None] | None = None
        # what consumers may read: records ending at or below it (the master's confirmOffset in
        # controller mode with allAckInSyncStateSet, readUnCommitted off); None: the whole log
        self.read_end: int | None = None
        self.on_read_end_advanced: Callable[[], None] | None = None  # wakes suspended pulls

    def set_read_end(self, end: int | None) -> None:
        """The gate RocketMQ puts on its ReputMessageService (getReputEndOffset): consume queue
        entries of records ending past ``end`` are not served nor counted in max offsets."""
        before, self.read_end = self.read_end, end
        advanced = end is None or (before is not None and end > before)
        if advanced and before != end and self.on_read_end_advanced is not None:
            self.on_read_end_advanced()

    def _visible_max(self, cq: ConsumeQueue) -> int:
        """The queue's max offset under ``read_end``: one entry read when all is visible, a
        binary search over the queue's tail otherwise (entries are in commit log order)."""
        hi, end = cq.max_offset_in_queue, self.read_end
        if end is None or hi == 0:
            return hi
        last = cq.get(hi - 1)
        if last is None or last[0] + last[1] <= end:
            return hi
        lo = cq.min_offset_in_queue
        while lo < hi:
            mid = (lo + hi) // 2
            entry = cq.get(mid)
            if entry is None or entry[0] + entry[1] > end:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def is_dispatched(self, phy_offset: int) -> bool:
        """True when every record ending at or before ``phy_offset`` is in its consume queue.

        Dispatch runs inside the append (local puts and ``append_raw`` alike) under
        ``put_lock``, so taking the lock waits out an append in progress; an offset the log has
        not reached yet stays False until later appends (poll with a deadline, or use a
        dispatch listener to be told)."""
        with self.put_lock:
            return self.dispatcher.dispatched_offset >= phy_offset

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return self._visible_max(cq) if cq else 0

    def logged_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue's max offset, the read gate aside: what this node's log holds."""
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset_in_queue if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset_in_queue if cq else 0

    def queue_max_offsets(self) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for (topic, qid), cq in list(self.queues.items()):
            out.setdefault(topic, {})[qid] = self._visible_max(cq)
        return out

    def _store_timestamp(self, phy_offset: int) -> int:
        rec = self.commit_log.lookup(phy_offset)
        return rec.store_timestamp

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset_in_queue, self._visible_max(cq)
        while lo < hi:
            mid = (lo + hi) // 2
            entry = cq.get(mid)
            if entry is None or entry[0] >= self.commit_log.max_offset:
                hi = mid
                continue
            if self._store_timestamp(entry[0]) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        tag_codes: set[int] | None = None,
        max_bytes: int = 256 * 1024,
        _retried: bool = False,
    ) -> GetMessageResult:
        """Up to ``max_msgs`` raw records of (topic, queue_id) from queue ``offset`` on.

        ``tag_codes`` filters by the consume queue's tag hash (the caller checks the exact tag
        afterwards, as RocketMQ's client does). Statuses and next offsets follow RocketMQ.
        """
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset_in_queue, self._visible_max(cq)
        if hi == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi or hi < offset <= cq.max_offset_in_queue:  # beyond confirm: wait there
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        records: list[bytes] = []
        size_total = 0
        next_offset = offset
        max_pulled = -1
        for qo, phy, size, tag_code in cq.iter_from(offset, max(max_msgs, 1) * 4 + 32):
            if qo >= hi or len(records) >= max_msgs or (records and size_total + size > max_bytes):
                break
            data, fault = self._served(cq, qo, phy, size)
            if fault is not None:
                if fault == "":
                    next_offset = qo + 1  # a quarantined range: nothing to serve
                    continue
                if not _retried and self.on_damage is not None:
                    self.on_damage(topic, queue_id, qo, fault)
                    return self.get_message(
                        topic, queue_id, offset, max_msgs, tag_codes, max_bytes, _retried=True
                    )
                break  # not served: the client retries
            next_offset = qo + 1
            if tag_codes is not None and tag_code not in tag_codes:
                continue
            records.append(data)
            size_total += size
            max_pulled = phy + size
        status = GetMessageStatus.FOUND if records else GetMessageStatus.NO_MATCHED_MESSAGE
        result = GetMessageResult(status, next_offset, lo, hi, records)
        result.max_phy_offset_pulled = max_pulled
        return result

    def _served(self, cq: ConsumeQueue, qo: int, phy: int, size: int) -> tuple[bytes, str | None]:
        """The record entry ``qo`` points at and None; or a fault: "" for a quarantined range,
        else why the entry is damaged (it must point at its own record: topic, queue, offset)."""
        log_end = self.commit_log.max_offset
        if size <= 0 or phy < self.commit_log.min_offset or phy + size > log_end:
            return (
                b"",
                f"entry ({phy}, {size}) outside the commit log [{self.commit_log.min_offset}, {log_end})",
            )
        try:
            data = self.commit_log.read_record(phy, size)
            rec = decode_record(data)
        except Exception as exc:  # noqa: BLE001 - no record at that position
            if int.from_bytes(self.commit_log.read(phy, 4), "big") != size and _quarantined(
                self.commit_log, phy
            ):
                log.warning(
                    "%s/%d: no record at queue offset %d (phy %d)", cq.topic, cq.queue_id, qo, phy
                )
                return b"", ""
            return b"", f"no record at commit log offset {phy} ({exc})"
        if int.from_bytes(data[_SYSFLAG], "big") & _ROLLBACK == _ROLLBACK:
            return b"", ""  # a repair's quarantine filler
        return data, record_fault(cq, qo, phy, size, rec)


def _quarantined(commit_log: CommitLog, phy: int) -> bool:
    try:
        rec = commit_log.lookup(phy)
    except Exception:  # noqa: BLE001
        return False
    return rec.sysflag & _ROLLBACK == _ROLLBACK
