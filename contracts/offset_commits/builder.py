"""The builder of offset commit records: an :class:`OffsetCommit` as its strict UTF-8 JSON body
and as the message the broker appends (topic, queue, ``TAGS``, ``KEYS``). The reader is
:mod:`contracts.offset_commits.reader`."""

from __future__ import annotations

import json

from contracts.errors import OffsetRecordError
from contracts.offset_commits.model import (
    BODY_MAX_BYTES,
    KIND_RESET,
    OFFSETS_QUEUE_ID,
    OFFSETS_TOPIC,
    VERSION,
    OffsetCommit,
)
from contracts.record.model import Message
from contracts.record.properties import PROPERTY_KEYS, PROPERTY_TAGS


def body_doc(c: OffsetCommit) -> dict:
    """The body as a JSON document (section 3b's field names, queue ids as decimal strings)."""
    doc = {
        "v": VERSION,
        "kind": c.kind,
        "group": c.group,
        "topic": c.topic,
        "offsets": {str(q): off for q, off in sorted(c.offsets.items())},
        "epoch": c.epoch,
        "at": c.at_ms,
        "from": c.from_addr,
    }
    if c.kind == KIND_RESET:
        doc["previous"] = {str(q): off for q, off in sorted(c.previous.items())}
        doc["by"] = c.by
    return doc


def encode_body(c: OffsetCommit) -> bytes:
    """The record's body: compact strict JSON in UTF-8 (no NaN, nothing but section 3b)."""
    data = json.dumps(
        body_doc(c), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode("utf-8")
    if len(data) > BODY_MAX_BYTES:
        raise OffsetRecordError("body", f"is {len(data)} bytes, at most {BODY_MAX_BYTES}")
    return data


def commit_message(c: OffsetCommit, born_host: tuple[str, int] = ("127.0.0.1", 0)) -> Message:
    """The message a broker appends for ``c`` (born at ``c.at_ms``)."""
    return Message(
        OFFSETS_TOPIC,
        encode_body(c),
        queue_id=OFFSETS_QUEUE_ID,
        properties={PROPERTY_TAGS: c.kind, PROPERTY_KEYS: c.group},
        born_timestamp=c.at_ms,
        born_host=born_host,
    )
