"""Delayed messages in the store (RocketMQ CommitLog's timing-message handling).

A message with the DELAY property (a level of ``messageDelayLevel``) is not stored in its topic:
it goes to ``SCHEDULE_TOPIC_XXXX``, queue ``level - 1``, with its real topic and queue in the
REAL_TOPIC / REAL_QID properties, and its consume queue entry carries the delivery time
(store timestamp + the level's delay) where other topics carry the tag hash code. The
ScheduleMessageService (broker/schedule.py) reads those queues and delivers when due.
"""

from __future__ import annotations

from collections.abc import Callable

from contracts.errors import ConfigError
from contracts.record.layout import SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK
from contracts.record.model import Message, Record
from contracts.record.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    tags_hash_code,
)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_MS = 1000  # RocketMQ: computeDeliverTimestamp for a level it does not know
_TRAN_MASK = 0xC


def queue_id_of_level(level: int) -> int:
    return level - 1


def delay_level(props: dict[str, str]) -> int:
    """The DELAY property as an int (0 when absent or not a number)."""
    raw = props.get(PROPERTY_DELAY_TIME_LEVEL)
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        return 0


def deliver_timestamp(levels_ms: list[int], level: int, store_timestamp_ms: int) -> int:
    if 1 <= level <= len(levels_ms):
        return store_timestamp_ms + levels_ms[level - 1]
    return store_timestamp_ms + DEFAULT_DELAY_MS


def to_schedule(msg: Message, levels_ms: list[int]) -> bool:
    """Redirect ``msg`` (in place) to the schedule topic when it carries a delay level > 0;
    a level above the highest is clamped to it, as RocketMQ does. Transactional prepared and
    rollback messages are left alone. Returns whether it was redirected."""
    level = delay_level(msg.properties)
    if level <= 0 or msg.sysflag & _TRAN_MASK in (
        SYSFLAG_TRANSACTION_PREPARED,
        SYSFLAG_TRANSACTION_ROLLBACK,
    ):
        return False
    level = min(level, len(levels_ms))
    props = msg.properties
    props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = queue_id_of_level(level)
    return True


def record_tags_code(levels_ms: list[int]) -> Callable[[Record], int]:
    """The dispatcher's tag-code function: delivery time for schedule records (from DELAY and
    the record's store timestamp), else the tag hash code."""

    def tags_code(rec: Record) -> int:
        if rec.topic == SCHEDULE_TOPIC:
            level = delay_level(rec.properties)
            if level > 0:
                return deliver_timestamp(levels_ms, min(level, len(levels_ms)), rec.store_timestamp)
        return tags_hash_code(rec.tags)

    return tags_code


_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str) -> list[int]:
    """``messageDelayLevel`` ("1s 5s 10s 30s 1m ...") as delays in ms; level N is index N-1."""
    levels = []
    for item in spec.split():
        unit = item[-1:]
        if unit not in _UNITS_MS or not item[:-1].isdigit():
            raise ConfigError(f"messageDelayLevel={spec!r}: bad level {item!r} (like 5s, 1m, 2h)")
        levels.append(int(item[:-1]) * _UNITS_MS[unit])
    if not levels:
        raise ConfigError("messageDelayLevel is empty")
    return levels
