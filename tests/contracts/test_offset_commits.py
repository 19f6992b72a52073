"""The offset commit record (DESIGN.md section 3b): what the builder writes the reader gives
back, through a whole commit log record; every broken field is refused with its name."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.errors import OffsetRecordError
from contracts.offset_commits.builder import body_doc, commit_message, encode_body
from contracts.offset_commits.model import (
    GROUP_MAX_LENGTH,
    OFFSET_MAX,
    OFFSETS_TOPIC,
    QUEUE_ID_MAX,
    OffsetCommit,
)
from contracts.offset_commits.reader import parse_body, parse_record
from contracts.record.builder import encode_message
from contracts.record.reader import decode_record

names = st.text("%|abcXYZ019_-", min_size=1, max_size=40)
queue_maps = st.dictionaries(
    st.integers(0, QUEUE_ID_MAX), st.integers(0, OFFSET_MAX), min_size=1, max_size=20
)
texts = st.text(
    st.characters(codec="utf-8", categories=("L", "N", "P", "S")), min_size=1, max_size=60
)


@st.composite
def commits(draw) -> OffsetCommit:
    offsets = draw(queue_maps)
    reset = draw(st.booleans())
    return OffsetCommit(
        kind="reset" if reset else "commit",
        group=draw(names),
        topic=draw(names),
        offsets=offsets,
        epoch=draw(st.integers(0, OFFSET_MAX)),
        at_ms=draw(st.integers(0, OFFSET_MAX)),
        from_addr=draw(texts),
        previous={q: draw(st.integers(0, OFFSET_MAX)) for q in offsets} if reset else {},
        by=draw(texts) if reset else None,
    )


@given(commits())
def test_round_trip_through_a_commit_log_record(c: OffsetCommit) -> None:
    enc = encode_message(commit_message(c), ("10.0.0.1", 10911))
    rec = decode_record(bytes(enc.stamp(7, 4096, c.at_ms)), base_offset=4096)
    assert rec.topic == OFFSETS_TOPIC and rec.queue_id == 0 and rec.crc_ok
    assert rec.properties["TAGS"] == c.kind and rec.properties["KEYS"] == c.group
    assert parse_record(rec) == c
    assert parse_body(encode_body(c)) == c


def _base() -> OffsetCommit:
    return OffsetCommit("commit", "g1", "orders", {0: 5, 3: 9}, 2, 1_700_000_000_000, "h:1")


def _with(**changes) -> bytes:
    doc = body_doc(_base())
    doc.update(changes)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"\xff{}", "body"),
        (b"[1]", "body"),
        (b'{"v": 1, "v": 1}', "body"),
        (_with(v=2), "v"),
        (_with(v=True), "v"),
        (_with(kind="undo"), "kind"),
        (_with(group=""), "group"),
        (_with(group="a/b"), "group"),
        (_with(group="g" * (GROUP_MAX_LENGTH + 1)), "group"),
        (_with(topic=None), "topic"),
        (_with(offsets={}), "offsets"),
        (_with(offsets={"01": 3}), "offsets"),
        (_with(offsets={"-1": 3}), "offsets"),
        (_with(offsets={"99999999999": 3}), "offsets queue id"),
        (_with(offsets={"0": -1}), "offsets[0]"),
        (_with(offsets={"0": 1.5}), "offsets[0]"),
        (_with(offsets={"0": False}), "offsets[0]"),
        (_with(epoch=-1), "epoch"),
        (_with(extra=1), "extra"),
        (_with(previous={"0": 1}), "previous"),  # a commit carries no previous
        (_with(kind="reset"), "by"),  # a reset without previous/by
        (_with(kind="reset", previous={"0": 1}, by="admin"), "previous"),  # not queue 3
    ],
)
def test_every_broken_field_is_refused_by_name(body: bytes, field: str) -> None:
    with pytest.raises(OffsetRecordError) as err:
        parse_body(body)
    assert err.value.field == field, str(err.value)


def test_nan_and_oversized_bodies_are_refused() -> None:
    with pytest.raises(OffsetRecordError, match="strict JSON"):
        parse_body(_with(epoch=float("nan")))
    with pytest.raises(OffsetRecordError, match="at most"):
        parse_body(b" " * 70_000)


def test_the_builder_refuses_what_the_reader_would() -> None:
    with pytest.raises(OffsetRecordError) as err:
        OffsetCommit("commit", "g1", "orders", {0: 1}, 0, 0, "h:1", by="admin")
    assert err.value.field == "by"


def test_tags_and_keys_must_agree_with_the_body() -> None:
    c = _base()
    msg = commit_message(c)
    msg.properties["KEYS"] = "other"
    rec = decode_record(bytes(encode_message(msg, ("127.0.0.1", 1)).stamp(0, 0, 0)))
    with pytest.raises(OffsetRecordError) as err:
        parse_record(rec)
    assert err.value.field == "KEYS"
