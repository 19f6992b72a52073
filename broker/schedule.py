"""ScheduleMessageService: delivers delayed messages when due (RocketMQ 4.x semantics).

Each delay level N has its queue ``SCHEDULE_TOPIC_XXXX/N-1`` whose consume queue entries carry
the delivery time in the tag-code slot (broker/store/delay.py). A tick walks every level's queue
from its delay offset: entries due (delivery time <= now) are put back into their real topic and
queue (REAL_TOPIC / REAL_QID) with the DELAY property removed and WAIT=false; the first entry
not yet due ends that level for this tick (entries of one level are in delivery order). The
per-level offsets live in ``delayOffset.json`` (the store's ``delay_offsets``), persisted every
``persist_interval_ms`` and at stop. Only a master delivers; on a slave the offsets come from
the master (SlaveSynchronize) and the service idles until a promotion.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.clock import SYSTEM_CLOCK, Clock
from broker.config_checks import parse_delay_levels
from broker.loop_service import Periodic
from broker.store import delay
from broker.store.results import PutMessageStatus
from contracts.record.model import Message, Record
from contracts.record.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_WAIT_STORE_MSG_OK,
)

log = logging.getLogger(__name__)

TICK_MS = 100  # RocketMQ DELAY_FOR_A_WHILE
PERSIST_INTERVAL_MS = 10_000  # RocketMQ flushDelayOffsetInterval
MAX_PER_LEVEL_PER_TICK = 1024  # bounded work per tick so other requests keep flowing
# In the commit log despite the status: counted as delivered (a retry would duplicate it).
_STORED = (
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
)


def time_ms() -> int:
    return SYSTEM_CLOCK.wall_ms()


def message_timeup(rec: Record) -> Message:
    """The message to deliver for a due schedule record (RocketMQ messageTimeup): its real topic
    and queue, DELAY cleared, WAIT=false; REAL_TOPIC / REAL_QID stay as RocketMQ leaves them."""
    props = dict(rec.properties)
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    real_qid = props.get(PROPERTY_REAL_QUEUE_ID)
    if not real_topic or real_qid is None:
        raise ValueError(
            f"schedule record at {rec.physical_offset} has no REAL_TOPIC/REAL_QID: {props}"
        )
    try:
        queue_id = int(real_qid)
    except ValueError:
        raise ValueError(
            f"schedule record at {rec.physical_offset}: REAL_QID {real_qid!r} is not an integer"
        ) from None
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
    return Message(
        topic=real_topic,
        body=rec.body,
        queue_id=queue_id,
        flag=rec.flag,
        properties=props,
        born_timestamp=rec.born_timestamp,
        born_host=rec.born_host,
        sysflag=rec.sysflag,
        reconsume_times=rec.reconsume_times,
    )


class ScheduleMessageService:
    """A node service (``async start/stop``, ``runtime_info``); ``deliver_due()`` is one tick,
    driven by the service's loop or directly by tests with an injected clock."""

    def __init__(
        self,
        store,
        clock_ms: Callable[[], int] = time_ms,
        tick_ms: int = TICK_MS,
        persist_interval_ms: int = PERSIST_INTERVAL_MS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``clock_ms`` is the wall time delivery is due by; ``clock`` paces the ticks."""
        self.store = store
        self.levels_ms: list[int] = parse_delay_levels(store.config.message_delay_level)
        self.clock_ms = clock_ms
        self.tick_ms = tick_ms
        self.persist_interval_ms = persist_interval_ms
        self.delivered = 0
        self._dirty = False
        self._last_persist_ms = clock_ms()
        self._ticker = Periodic(
            "schedule",
            period_ms=tick_ms,
            round_=self._tick,
            clock=clock,
            run_first_round_at_once=True,
        )
        # Entries replicated to a slave or re-indexed after a restart get their delivery time
        # from the record (DELAY + store timestamp), not the tag hash.
        store.dispatcher.tags_code = delay.record_tags_code(self.levels_ms)

    @property
    def offsets(self) -> dict[int, int]:
        """Level -> delivered offset (a copy; the store's DelayOffsetTable owns them)."""
        return self.store.delay_offsets.table

    @property
    def max_delay_level(self) -> int:
        return len(self.levels_ms)

    # -- the tick -------------------------------------------------------------------------------

    async def deliver_due(self) -> int:
        """Deliver every due entry of every level; returns how many were delivered."""
        if not self.store.role.is_master:
            return 0
        total = 0
        for level in range(1, self.max_delay_level + 1):
            total += await self._deliver_level(level)
        self.delivered += total
        now = self.clock_ms()
        if self._dirty and now - self._last_persist_ms >= self.persist_interval_ms:
            self.persist()
        return total

    async def _deliver_level(self, level: int) -> int:
        cq = self.store.queues.get((delay.SCHEDULE_TOPIC, delay.queue_id_of_level(level)))
        if cq is None:
            return 0
        offset = self.store.delay_offsets.get(level, 0)
        if offset < cq.min_offset_in_queue:
            log.warning(
                "delay level %d: offset %d below the queue's minimum %d, skipping ahead",
                level,
                offset,
                cq.min_offset_in_queue,
            )
            offset = cq.min_offset_in_queue
        delivered = 0
        now = self.clock_ms()
        for qo, phy, size, deliver_ms in list(cq.iter_from(offset, MAX_PER_LEVEL_PER_TICK)):
            # RocketMQ correctDeliverTimestamp: a time further out than the level's delay (clock
            # stepped back) is treated as due now.
            if deliver_ms > now + self.levels_ms[level - 1]:
                deliver_ms = now
            if deliver_ms > now:
                break
            if not await self._deliver_one(level, qo, phy, size):
                break
            offset = qo + 1
            delivered += 1
            self._set_offset(level, offset)
        return delivered

    async def _deliver_one(self, level: int, qo: int, phy: int, size: int) -> bool:
        """Put one due message back into its topic; False means retry at the next tick."""
        try:
            rec = self.store.look_message_by_offset(phy)
            msg = message_timeup(rec)
        except Exception as exc:  # a broken record must not stall its level for ever
            log.error("delay level %d offset %d (commit log %d): skipped: %s", level, qo, phy, exc)
            return True
        result = await self.store.put_message_async(msg)
        if not (result.status.ok or result.status in _STORED):
            log.warning(
                "delay level %d offset %d: delivery to %s/%d failed (%s), retrying",
                level,
                qo,
                msg.topic,
                msg.queue_id,
                result.status.value,
            )
            return False
        return True

    def _set_offset(self, level: int, offset: int) -> None:
        self.store.delay_offsets.advance(level, offset)
        self._dirty = True

    def persist(self) -> None:
        self.store.delay_offsets.persist()
        self._dirty = False
        self._last_persist_ms = self.clock_ms()

    # -- service --------------------------------------------------------------------------------

    async def start(self) -> None:
        self._ticker.start()

    async def _tick(self) -> None:
        await self.deliver_due()  # a failing round is logged by the loop, retried next tick

    async def stop(self) -> None:
        await self._ticker.stop()
        if self._dirty and self.store.role.is_master:
            self.persist()

    def handlers(self) -> dict:
        return {}

    def runtime_info(self) -> dict[str, str]:
        """RocketMQ's ``scheduleMessageOffset_{level}``: "delivered offset,max offset"."""
        info = {}
        for level in range(1, self.max_delay_level + 1):
            cq = self.store.queues.get((delay.SCHEDULE_TOPIC, delay.queue_id_of_level(level)))
            if cq is not None:
                info[f"scheduleMessageOffset_{level}"] = (
                    f"{self.offsets.get(level, 0)},{cq.max_offset_in_queue}"
                )
        return info
