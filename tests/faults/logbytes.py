"""Commit log bytes for generated archives, encoded with the broker's own record encoder.

A :class:`LogWriter` lays records out as the broker's commit log does (a record never crosses a
file end; a BLANK filler closes a file that has no room for the next record plus a closing
BLANK), stamps queue offsets, physical offsets and store timestamps, and remembers where each
record's fields sit, so a generated fault can name the exact byte it touched.
:func:`write_store_dir` writes the bytes as a stopped store's ``commitlog/`` files, which the
real :class:`~broker.archive.shipper.Shipper` then ships.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from contracts.record.builder import encode_blank, encode_message
from contracts.record.ids import message_id
from contracts.record.layout import END_FILE_MIN_BLANK_LENGTH, OFFSET_QUEUEOFFSET
from contracts.record.model import Message
from contracts.record.properties import PROPERTY_KEYS, PROPERTY_TAGS, properties_to_string
from tests.spark_jobs.builder import FILE_SIZE

TOPIC = "orders"
STORE_HOST = ("127.0.0.1", 10911)
TS0_MS = 1_700_000_000_000  # store timestamp of the first record
TS_STEP_MS = 10


@dataclass(frozen=True)
class Rec:
    """Where one record (or BLANK filler) of a generated log is, and what it says."""

    offset: int
    size: int
    blank: bool
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    store_ts: int = 0
    body_at: int = 0  # absolute offsets of the body, the properties, the store timestamp
    body_len: int = 0
    props_at: int = 0
    props_len: int = 0
    ts_at: int = 0

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def msg_id(self) -> str:
        return message_id(STORE_HOST[0], STORE_HOST[1], self.offset)


@dataclass
class Log:
    data: bytearray
    recs: list[Rec]

    @property
    def end(self) -> int:
        return len(self.data)

    def messages(self) -> list[Rec]:
        return [r for r in self.recs if not r.blank]

    def boundaries(self) -> list[int]:
        """Every offset a chunk may start or end at."""
        return [r.offset for r in self.recs] + [self.end]

    def record_at(self, offset: int) -> Rec:
        return next(r for r in self.recs if r.offset <= offset < r.end)

    def queue_max(self) -> dict[int, int]:
        """Per queue id: one past the highest queue offset (the consume queue's max offset)."""
        out: dict[int, int] = {}
        for r in self.messages():
            out[r.queue_id] = max(out.get(r.queue_id, 0), r.queue_offset + 1)
        return out

    def cut(self, end: int) -> Log:
        """The log as it was when it ended at ``end`` (a record boundary)."""
        if end not in self.boundaries():
            raise ValueError(f"{end} is not a record boundary")
        return Log(bytearray(self.data[:end]), [r for r in self.recs if r.end <= end])


class LogWriter:
    """Appends records as the commit log does; ``body_tag`` makes two logs' bodies differ."""

    def __init__(self, base: Log | None = None, ts0_ms: int = TS0_MS) -> None:
        self.data = bytearray(base.data) if base else bytearray()
        self.recs = list(base.recs) if base else []
        self.next_qo: dict[tuple[str, int], int] = {}
        for r in self.recs:
            if not r.blank:
                self.next_qo[(r.topic, r.queue_id)] = r.queue_offset + 1
        msgs = [r for r in self.recs if not r.blank]
        self.ts_ms = msgs[-1].store_ts + TS_STEP_MS if msgs else ts0_ms

    def put(self, body: bytes, queue_id: int, tag: str = "t", topic: str = TOPIC) -> Rec:
        props = {PROPERTY_TAGS: tag, PROPERTY_KEYS: f"key{len(self.recs)}"}
        msg = Message(topic, body, queue_id=queue_id, properties=props, born_timestamp=self.ts_ms)
        enc = encode_message(msg, STORE_HOST)
        size = len(enc)
        pos = len(self.data) % FILE_SIZE
        if size + END_FILE_MIN_BLANK_LENGTH > FILE_SIZE:
            raise ValueError(f"a {size}-byte record cannot fit a {FILE_SIZE}-byte file")
        if pos + size + END_FILE_MIN_BLANK_LENGTH > FILE_SIZE:
            remaining = FILE_SIZE - pos
            self.recs.append(Rec(len(self.data), remaining, True))
            self.data += encode_blank(remaining) + bytes(remaining - 8)
        offset = len(self.data)
        qo = self.next_qo.get((topic, queue_id), 0)
        self.next_qo[(topic, queue_id)] = qo + 1
        data = enc.stamp(qo, offset, self.ts_ms)
        props_len = len(properties_to_string(props).encode())
        topic_len = len(topic.encode())
        body_at = offset + size - props_len - 2 - topic_len - 1 - len(body)
        rec = Rec(
            offset,
            size,
            False,
            topic,
            queue_id,
            qo,
            self.ts_ms,
            body_at=body_at,
            body_len=len(body),
            props_at=offset + size - props_len,
            props_len=props_len,
            ts_at=offset + enc.store_timestamp_pos,
        )
        self.ts_ms += TS_STEP_MS
        self.data += data
        self.recs.append(rec)
        return rec

    def log(self) -> Log:
        return Log(bytearray(self.data), list(self.recs))


def make_log(n: int, body_len: int, queues: int, tag: str = "m", base: Log | None = None) -> Log:
    """``n`` messages (round robin over ``queues`` queues) after ``base``."""
    w = LogWriter(base)
    for i in range(n):
        body = (f"{tag}{i}-".encode() * (body_len // 3 + 1))[:body_len]
        w.put(body, queue_id=i % queues)
    return w.log()


def shift_queue_offsets(log: Log, from_rec: Rec, by: int = 1) -> Log:
    """A queue-offset gap: ``from_rec`` and every later record of its queue get ``+by`` (the
    body CRC does not cover the field)."""
    data = bytearray(log.data)
    recs = []
    for r in log.recs:
        if not r.blank and r.queue_id == from_rec.queue_id and r.offset >= from_rec.offset:
            r = replace(r, queue_offset=r.queue_offset + by)
            pos = r.offset + OFFSET_QUEUEOFFSET
            data[pos : pos + 8] = r.queue_offset.to_bytes(8, "big", signed=True)
        recs.append(r)
    return Log(data, recs)


def flipped(log: Log, at: int, mask: int = 0x01) -> Log:
    data = bytearray(log.data)
    data[at] ^= mask
    return Log(data, list(log.recs))


def write_store_dir(log: Log, path: Path) -> Path:
    """The log as a stopped store's ``commitlog/`` files (the last one zero-filled)."""
    cl = path / "commitlog"
    cl.mkdir(parents=True)
    for start in range(0, max(len(log.data), 1), FILE_SIZE):
        piece = bytes(log.data[start : start + FILE_SIZE])
        (cl / f"{start:020d}").write_bytes(piece + bytes(FILE_SIZE - len(piece)))
    return path
