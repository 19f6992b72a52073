"""The ``delivery`` check's fields from the record walk (``record_walk.message_fields``): the
compiled walk and the Python walk give the same arrays, and they say what the full decoder
says (store time, topic, store host, UNIQ_KEY), over records with and without a UNIQ_KEY and
properties that only look like one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import _walk_nb
from contracts.record.builder import encode_message
from contracts.record.ids import message_id
from contracts.record.model import Message
from contracts.record.reader import scan_records
from contracts.record_walk import key_hash, message_fields

# property names and values built of pieces that make the parser's corners: separators inside
# names and values, names that start or end like UNIQ_KEY, empty values, non-ASCII
pieces = st.sampled_from(["UNIQ_KEY", "\x01", "\x02", "UNIQ_KE", "Y", "x", "é", "", "K1"])
texts = st.lists(pieces, max_size=5).map("".join)
props = st.dictionaries(st.one_of(st.just("UNIQ_KEY"), texts), texts, max_size=4)
records = st.lists(
    st.tuples(
        st.sampled_from(["A", "B", "tópico", "T" * 300]),  # a 300-byte name needs the v2 magic
        props,
        st.sampled_from([("127.0.0.1", 10911), ("::1", 10912), ("10.0.0.2", 1)]),
        st.integers(-(2**40), 2**41),
    ),
    min_size=1,
    max_size=12,
)


def _chunk(recs, start: int) -> bytes:
    data = bytearray()
    for i, (topic, properties, host, at) in enumerate(recs):
        msg = Message(topic, b"b" * i, properties=properties)
        data += encode_message(msg, host).stamp(i, start + len(data), at)
    return bytes(data)


def _decoded(data: bytes, start: int) -> list[tuple]:
    return [
        (r.physical_offset, r.store_timestamp, r.topic, r.properties.get("UNIQ_KEY"), r.msg_id)
        for r in scan_records(data, base_offset=start, source="t", with_body=False)
    ]


def _named(data: bytes, fields) -> list[tuple]:
    rows, topics, hosts = fields
    out = []
    for off, at, t, u0, ul, h, kh in rows.tolist():
        t0, tl = topics[t]
        topic = data[t0 : t0 + tl]
        uniq = data[u0 : u0 + ul] if ul >= 0 else None
        assert kh == key_hash(topic, uniq)
        h0, hl = hosts[h]
        msg_id = data[h0 : h0 + hl].hex().upper() + f"{off:016X}"
        name = None if uniq is None else uniq.decode()
        out.append((off, at, topic.decode(), name, msg_id))
    return out


@settings(max_examples=150, deadline=None)
@given(records, st.integers(0, 2**40))
def test_compiled_and_python_walks_agree_with_the_decoder(recs, start) -> None:
    data = _chunk(recs, start)
    py = message_fields(data, start, compiled=False)
    assert _named(data, py) == _decoded(data, start)
    if _walk_nb.available():
        nb = message_fields(data, start)
        assert all(np.array_equal(a, b) for a, b in zip(nb, py, strict=True))


def test_msg_ids_and_ipv6_hosts() -> None:
    data = _chunk([("A", {"UNIQ_KEY": "k"}, ("::1", 7), 5)], 64)
    rows, _topics, hosts = message_fields(data, 64)
    h0, hl = hosts[0]
    assert hl == 20
    assert data[h0 : h0 + hl].hex().upper() + f"{64:016X}" == message_id("::1", 7, 64)
    assert rows[0, 4] == 1


@pytest.mark.skipif(not _walk_nb.available(), reason="numba not installed")
def test_too_many_topics_falls_back_to_python() -> None:
    recs = [(f"t{i}", {}, ("127.0.0.1", 1), i) for i in range(_walk_nb.TABLE_ROWS + 1)]
    data = _chunk(recs, 0)
    assert _walk_nb.message_fields(data, 0) is None
    rows, topics, _hosts = message_fields(data, 0)
    assert len(rows) == len(topics) == _walk_nb.TABLE_ROWS + 1
