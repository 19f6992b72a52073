"""An offset commit record's content (:class:`OffsetCommit`) and the validation every field
passes, whichever side made it: the builder refuses to write a record the reader would refuse.

DESIGN.md section 3b: topic ``RMQ_SYS_CONSUMER_OFFSETS``, queue 0; ``TAGS`` = the kind,
``KEYS`` = the consumer group; body strict UTF-8 JSON ``{"v": 1, "kind", "group", "topic",
"offsets": {"<queueId>": nextOffset}, "epoch", "at", "from"}``, a ``reset`` also ``"previous"``
and ``"by"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from contracts.errors import OffsetRecordError

#: the system topic holding every commit (one queue)
OFFSETS_TOPIC = "RMQ_SYS_CONSUMER_OFFSETS"
OFFSETS_QUEUE_ID = 0
VERSION = 1
KIND_COMMIT = "commit"
KIND_RESET = "reset"
KINDS = (KIND_COMMIT, KIND_RESET)

#: RocketMQ's limits: a topic of at most 127 of ``[%|a-zA-Z0-9_-]``, a group at most 120
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 120
_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
#: queue ids and offsets the broker can hold (Java int / long, never negative here)
QUEUE_ID_MAX = 2**31 - 1
OFFSET_MAX = 2**63 - 1
#: most queues one record carries (a commit coalesces one (group, topic)), and its body size
QUEUES_MAX = 1024
BODY_MAX_BYTES = 64 * 1024
TEXT_MAX_LENGTH = 255  # "from" (host:port) and "by" (an account name or "admin")


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One record: ``offsets`` maps queueId -> the next offset to consume (RocketMQ's committed
    offset). A reset also names what each queue held before (``previous``) and who asked
    (``by``); a commit has ``previous`` empty and ``by`` None."""

    kind: str
    group: str
    topic: str
    offsets: dict[int, int]
    epoch: int
    at_ms: int
    from_addr: str
    previous: dict[int, int] = field(default_factory=dict)
    by: str | None = None

    def __post_init__(self) -> None:
        validate(self)

    @property
    def is_reset(self) -> bool:
        return self.kind == KIND_RESET


def _fail(field_name: str, why: str) -> OffsetRecordError:
    return OffsetRecordError(field_name, why)


def _name(field_name: str, value: object, max_length: int) -> None:
    if not isinstance(value, str) or not value:
        raise _fail(field_name, f"must be a non-empty string, got {value!r:.80}")
    if len(value) > max_length:
        raise _fail(field_name, f"is {len(value)} characters, at most {max_length}")
    if not _NAME.fullmatch(value):
        raise _fail(field_name, f"{value!r:.80} has characters outside [%|a-zA-Z0-9_-]")


def _int(field_name: str, value: object, low: int, high: int) -> None:
    if type(value) is not int:  # bool is an int subclass: refused
        raise _fail(field_name, f"must be an integer, got {value!r:.80}")
    if not low <= value <= high:
        raise _fail(field_name, f"{value} is outside [{low}, {high}]")


def _text(field_name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise _fail(field_name, f"must be a non-empty string, got {value!r:.80}")
    if len(value) > TEXT_MAX_LENGTH or not value.isprintable():
        raise _fail(field_name, f"must be at most {TEXT_MAX_LENGTH} printable characters")


def _queues(field_name: str, value: object) -> None:
    if not isinstance(value, dict) or not value:
        raise _fail(field_name, "must map at least one queue id to an offset")
    if len(value) > QUEUES_MAX:
        raise _fail(field_name, f"holds {len(value)} queues, at most {QUEUES_MAX}")
    for q, off in value.items():
        _int(f"{field_name} queue id", q, 0, QUEUE_ID_MAX)
        _int(f"{field_name}[{q}]", off, 0, OFFSET_MAX)


def validate(c: OffsetCommit) -> None:
    """Raise :class:`OffsetRecordError` naming the first field that breaks section 3b."""
    if c.kind not in KINDS:
        raise _fail("kind", f"must be one of {', '.join(KINDS)}, got {c.kind!r:.80}")
    _name("group", c.group, GROUP_MAX_LENGTH)
    _name("topic", c.topic, TOPIC_MAX_LENGTH)
    _queues("offsets", c.offsets)
    _int("epoch", c.epoch, 0, OFFSET_MAX)
    _int("at", c.at_ms, 0, OFFSET_MAX)
    _text("from", c.from_addr)
    if c.kind == KIND_RESET:
        _queues("previous", c.previous)
        if set(c.previous) != set(c.offsets):
            raise _fail("previous", "must name exactly the queues of offsets")
        _text("by", c.by)
    elif c.previous or c.by is not None:
        raise _fail("previous" if c.previous else "by", "only a reset carries it")
