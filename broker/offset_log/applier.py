"""Every node applies the offset commit records of its own log to its ConsumerOffsetManager, in
log order, through the offsets topic's consume queue (one queue, ``RMQ_SYS_CONSUMER_OFFSETS``).

A slave applies each record as soon as it is dispatched (the HA stream brought it). A master
applies a record only once its end is at or below ``visible_end()``: the offset every in-sync
slave acknowledged (HAService's confirmOffset; the log end when no slave is in sync, as Kafka's
high watermark with the leader alone in the ISR). So what a master answers to
QUERY_CONSUMER_OFFSET, persists in ``consumerOffset.json`` and hands SlaveSynchronize is never
a commit a failover can take back. A commit raises the offset (forward-only), a reset sets it.
At start the applier replays the queue from the position ``consumerOffset.json`` names
(``logOffset``, the physical offset after the last applied record, and ``logQueueOffset``, its
queue offset; the queue's first entry without them): the checkpoint may be older than the log,
and applying a record twice changes nothing.

``wait_applied`` is how a commit's answer waits to be visible (read-your-writes): its waiters
are released by the catch-up round that applies their record while the node is a master (a
slave's apply confirms nothing), which runs as the records are
dispatched and as the master's confirmOffset moves (``OffsetLogService``), not by polling.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable

from broker.clock import SYSTEM_CLOCK, Clock, sleep_unless_set
from contracts.errors import CorruptRecordError, OffsetRecordError
from contracts.offset_commits.model import OFFSETS_QUEUE_ID, OFFSETS_TOPIC
from contracts.offset_commits.reader import parse_record
from contracts.record.reader import decode_record

log = logging.getLogger(__name__)

READ_BATCH = 64  # records read from the consume queue per step


class OffsetLogApplier:
    """``store``: the node's MessageStore (``get_message``, queue offsets, ``consumer_offsets``);
    ``visible_end()``: the physical offset up to which records may be applied (None: all);
    ``clock``: what ``wait_applied`` times out on."""

    def __init__(
        self, store, visible_end: Callable[[], int | None], clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.store = store
        self.visible_end = visible_end
        self.clock = clock
        # (queue offset, seq, set once applied) of the commits waiting to be visible
        self._waiters: list[tuple[int, int, asyncio.Event]] = []
        self._seq = itertools.count()
        # from the checkpoint's position (consumerOffset.json "logOffset"/"logQueueOffset")
        self.log_offset, self.next_queue_offset = store.consumer_offsets.log_position
        self.applied = 0
        self.refused = 0

    def catch_up(self) -> int:
        """Apply the visible records not applied yet; returns how many were applied."""
        done = self._catch_up()
        waiters = self._waiters
        if waiters and waiters[0][0] < self.next_queue_offset and self.visible_end() is not None:
            # as a master only: a slave (a demoted master) applies its log confirmed or not,
            # and its tail past the new master's may yet be cut
            while waiters and waiters[0][0] < self.next_queue_offset:
                heapq.heappop(waiters)[2].set()
        return done

    @property
    def waiting(self) -> int:
        """How many commits wait in ``wait_applied``."""
        return len(self._waiters)

    async def wait_applied(self, queue_offset: int, timeout_ms: float) -> bool:
        """Wait until the record at ``queue_offset`` of the offsets queue is applied by this
        node as a master (what QUERY_CONSUMER_OFFSET answers holds it, confirmed), at most
        ``timeout_ms`` of the clock; True when it is. Woken by the catch-up that applies it."""
        waiter = (queue_offset, next(self._seq), asyncio.Event())
        heapq.heappush(self._waiters, waiter)
        self.catch_up()
        try:
            return await sleep_unless_set(self.clock, waiter[2], timeout_ms)
        finally:
            if not waiter[2].is_set():  # timed out or cancelled: nobody to release
                self._waiters.remove(waiter)
                heapq.heapify(self._waiters)

    def _catch_up(self) -> int:
        top = self.store.get_max_offset_in_queue(OFFSETS_TOPIC, OFFSETS_QUEUE_ID)
        if self.next_queue_offset > top:  # the log was truncated under us (a rejoining master)
            self.next_queue_offset = top
        lowest = self.store.get_min_offset_in_queue(OFFSETS_TOPIC, OFFSETS_QUEUE_ID)
        self.next_queue_offset = max(self.next_queue_offset, lowest)
        if self.next_queue_offset >= top:
            return 0  # nothing new: the periodic round costs two lookups, no HA status
        limit = self.visible_end()  # once per round (HAService.status walks the slaves)
        done = 0
        while self.next_queue_offset < top:
            res = self.store.get_message(
                OFFSETS_TOPIC, OFFSETS_QUEUE_ID, self.next_queue_offset, READ_BATCH
            )
            if not res.found or not res.records:
                break
            for raw in res.records:
                rec = decode_record(raw, source=OFFSETS_TOPIC)
                end = rec.stored_physical_offset + rec.total_size
                if limit is not None and end > limit:
                    return done
                self._apply(rec, slave=limit is None)
                self.log_offset = end
                self.next_queue_offset += 1
                self.store.consumer_offsets.log_position = (end, self.next_queue_offset)
                done += 1
        return done

    def _apply(self, rec, slave: bool) -> None:
        try:
            c = parse_record(rec)
        except (OffsetRecordError, CorruptRecordError) as exc:
            self.refused += 1
            log.error("offset record at %d not applied: %s", rec.stored_physical_offset, exc)
            return
        offsets = self.store.consumer_offsets
        for queue_id, offset in c.offsets.items():
            before = offsets.query(c.group, c.topic, queue_id)
            offsets.apply_logged(c.group, c.topic, queue_id, offset, reset=c.is_reset)
            if c.is_reset and slave and before != offset:  # recorded as the slave's event too
                offsets.notify_reset(c.group, c.topic, queue_id, before, offset)
        self.applied += 1
