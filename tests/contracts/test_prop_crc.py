"""The record CRC property (RocketMQ 5's enabledAppendPropCRC): its bytes, and the walk's
verdict on a record torn inside its topic or properties (recovery's torn tail)."""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts._walk_valid import valid_step
from contracts.record.builder import encode_message
from contracts.record.model import Message
from contracts.record.prop_crc import (
    CRC32_RESERVED_LEN,
    PROPERTY_CRC32,
    carried_crc_ok,
    crc_digits,
)
from contracts.record.reader import decode_record

HOST = ("127.0.0.1", 10911)


def _record(props: dict[str, str], prop_crc: bool = True, topic: str = "T") -> bytearray:
    msg = Message(topic, b"body", 1, properties=props)
    return encode_message(msg, HOST, prop_crc).stamp(7, 0, 1_700_000_000_000)


def _step(rec: bytearray):
    """The walk's verdict on the record at the start of a file (zeros after it)."""
    buf = bytes(rec) + bytes(8)
    return valid_step(buf, 0, base_offset=0, limit=len(buf))


def test_the_bytes_are_rocketmqs():
    # MessageDecoder.createCrc32: key, \x01, ten digits least significant first, \x02
    assert crc_digits(1234567890) == b"0987654321"
    assert crc_digits(5) == b"5000000000"
    rec = _record({"KEYS": "k"})
    assert len(rec) == len(_record({"KEYS": "k"}, prop_crc=False)) + CRC32_RESERVED_LEN
    tail = bytes(rec[-CRC32_RESERVED_LEN:])
    assert tail[:9] == b"__CRC32#\x01" and tail[-1:] == b"\x02"
    crc = zlib.crc32(bytes(rec[:-CRC32_RESERVED_LEN])) & 0x7FFFFFFF
    assert int(tail[9:19][::-1]) == crc  # covers the stamped offsets and timestamp too
    decoded = decode_record(rec)
    assert decoded.properties["KEYS"] == "k" and PROPERTY_CRC32 in decoded.properties
    assert carried_crc_ok(rec, 0, len(rec)) is True


def test_without_it_the_record_is_as_before_and_a_brought_crc_is_dropped():
    plain = _record({"KEYS": "k"}, prop_crc=False)
    assert carried_crc_ok(plain, 0, len(plain)) is None
    forged = _record({"KEYS": "k", PROPERTY_CRC32: "0000000000"}, prop_crc=False)
    assert forged == plain  # a message's own __CRC32# never reaches the log
    # a value shaped as the property is not a property of its own: not judged
    inside = _record({"K": "v\x01x__CRC32#\x010000000000"}, prop_crc=False)
    assert carried_crc_ok(inside, 0, len(inside)) is None
    assert _step(inside)[0] is not None


@settings(max_examples=200, deadline=None)
@given(
    props=st.dictionaries(
        st.text("abcXYZ_", min_size=1, max_size=8), st.text("xyz01", max_size=20), max_size=3
    ),
    topic=st.text("abcdefT", min_size=1, max_size=30),
    data=st.data(),
)
def test_a_record_torn_past_its_body_fails_the_walk(props, topic, data):
    rec = _record(props, topic=topic)
    body_end = len(rec) - len(topic) - 1 - 2 - (len(rec) - len(_record(props, False, topic)))
    body_end -= sum(len(k) + len(v) + 2 for k, v in props.items())
    cut = data.draw(st.integers(body_end, len(rec) - 1), label="torn from")
    torn = bytearray(rec)
    torn[cut:] = bytes(len(rec) - cut)  # the page holding the tail never reached the disk
    if torn == rec:
        return  # zeros over zeros: nothing torn
    got, why = _step(torn)
    assert _step(rec)[0] is not None
    assert got is None and why, f"kept a record torn from byte {cut} of {len(rec)}"
