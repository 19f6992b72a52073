"""The reader of offset commit records: a body (strict UTF-8 JSON, section 3b) or a whole
decoded record (its topic, ``TAGS`` and ``KEYS`` must agree with the body) as an
:class:`OffsetCommit`; anything else is an :class:`OffsetRecordError` naming the field. The
builder is :mod:`contracts.offset_commits.builder`."""

from __future__ import annotations

import json

from contracts.errors import OffsetRecordError
from contracts.offset_commits.model import (
    BODY_MAX_BYTES,
    KIND_RESET,
    OFFSETS_TOPIC,
    QUEUE_ID_MAX,
    VERSION,
    OffsetCommit,
)
from contracts.record.model import Record
from contracts.record.properties import PROPERTY_KEYS, PROPERTY_TAGS

_COMMIT_FIELDS = frozenset({"v", "kind", "group", "topic", "offsets", "epoch", "at", "from"})
_RESET_FIELDS = _COMMIT_FIELDS | {"previous", "by"}


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise OffsetRecordError("body", f"names {dup!r:.80} twice")
    return doc


def _reject_constant(name: str) -> None:
    raise OffsetRecordError("body", f"holds {name}, which strict JSON has not")


def _queue_map(field_name: str, value: object) -> dict[int, int]:
    if not isinstance(value, dict):
        raise OffsetRecordError(field_name, f"must be an object, got {value!r:.80}")
    out = {}
    for key, off in value.items():
        # a decimal queue id as Java prints it: no sign, no leading zero, no spaces
        if not (key.isascii() and key.isdigit() and (key == "0" or key[0] != "0")):
            raise OffsetRecordError(field_name, f"queue id {key!r:.40} is not a decimal int")
        q = int(key) if len(key) <= 10 else QUEUE_ID_MAX + 1
        out[q] = off
    return out


def parse_body(body: bytes) -> OffsetCommit:
    """The commit a record body holds; :class:`OffsetRecordError` when it breaks section 3b."""
    if len(body) > BODY_MAX_BYTES:
        raise OffsetRecordError("body", f"is {len(body)} bytes, at most {BODY_MAX_BYTES}")
    try:
        text = bytes(body).decode("utf-8", errors="strict")
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise OffsetRecordError("body", f"is not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise OffsetRecordError("body", f"is not JSON ({exc.msg} at {exc.pos})") from exc
    if not isinstance(doc, dict):
        raise OffsetRecordError("body", "must be a JSON object")
    if doc.get("v") != VERSION or type(doc.get("v")) is not int:
        raise OffsetRecordError("v", f"must be {VERSION}, got {doc.get('v')!r:.40}")
    allowed = _RESET_FIELDS if doc.get("kind") == KIND_RESET else _COMMIT_FIELDS
    missing = sorted(allowed - set(doc))
    if missing:
        raise OffsetRecordError(missing[0], "is missing")
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise OffsetRecordError(unknown[0], "is not a field of this record kind")
    return OffsetCommit(
        kind=doc["kind"],
        group=doc["group"],
        topic=doc["topic"],
        offsets=_queue_map("offsets", doc["offsets"]),
        epoch=doc["epoch"],
        at_ms=doc["at"],
        from_addr=doc["from"],
        previous=_queue_map("previous", doc["previous"]) if "previous" in doc else {},
        by=doc.get("by"),
    )


def is_offset_record(rec: Record) -> bool:
    """Whether a decoded record sits in the offsets topic (BLANK fillers never do)."""
    return not rec.is_blank and rec.topic == OFFSETS_TOPIC


def parse_record(rec: Record) -> OffsetCommit:
    """The commit of a record of the offsets topic, its ``TAGS`` and ``KEYS`` checked against
    the body (``OffsetRecordError`` naming the disagreeing property)."""
    if not is_offset_record(rec):
        raise OffsetRecordError("topic", f"{rec.topic!r:.80} is not {OFFSETS_TOPIC}")
    c = parse_body(rec.body)
    if rec.properties.get(PROPERTY_TAGS) != c.kind:
        raise OffsetRecordError("TAGS", f"{rec.properties.get(PROPERTY_TAGS)!r:.40} != kind")
    if rec.properties.get(PROPERTY_KEYS) != c.group:
        raise OffsetRecordError("KEYS", f"{rec.properties.get(PROPERTY_KEYS)!r:.80} != group")
    return c
