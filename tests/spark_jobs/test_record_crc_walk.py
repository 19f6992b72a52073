"""Log integrity's record walk checks the record CRC property (``__CRC32#``, RocketMQ 5's
enabledAppendPropCRC) where a record carries it: a changed byte the body CRC does not cover
(header fields, topic, properties) is a damaged record at its offset, found alike by the three
walks (no Spark needed). Records without the property are judged as before."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.record.builder import encode_message
from contracts.record.model import Message
from contracts.record.prop_crc import CRC32_RESERVED_LEN
from contracts.record_walk import check_chunk_nb, check_chunk_np, check_chunk_py, check_slow

WALKS = {"py": check_chunk_py, "np": check_chunk_np, "numba": check_chunk_nb}
HOST = ("127.0.0.1", 10911)
FILE_SIZE = 1 << 20
N = 24
# header fields the body CRC does not cover and a flip leaves decodable: QUEUEID, FLAG,
# QUEUEOFFSET; BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES,
# PREPAREDTRANSACTIONOFFSET (IPv4 hosts)
HEADER = [*range(12, 28), *range(40, 84)]


def _chunk(prop_crc: bool) -> tuple[bytes, list[int], list[dict[str, range]]]:
    """``N`` records of two queues from offset 0: the bytes, each record's offset and the
    byte ranges (relative to it) of its header fields, topic and properties that a flip in
    must be caught when it carries the CRC property."""
    out, starts, regions = bytearray(), [], []
    for i in range(N):
        body = f"body-{i:04d}|".encode() * 12
        msg = Message("OrdersTopic", body, i % 2, properties={"TAGS": "t", "KEYS": f"k{i}"})
        rec = encode_message(msg, HOST, prop_crc).stamp(i // 2, len(out), 1_700_000_000_000 + i)
        body_end = bytes(rec).index(body) + len(body)
        topic_end = body_end + 1 + len("OrdersTopic")
        key_at = len(rec) - CRC32_RESERVED_LEN
        regions.append(
            {
                "header": HEADER,
                "topic": range(body_end + 1, topic_end),
                # the properties' text up to the CRC property's separator and key (a flip there
                # makes a record without the property: see the test below)
                "properties": range(topic_end + 2, key_at - 1 if prop_crc else len(rec)),
                "digits": range(key_at + 9, len(rec)),  # ten digits and the final \x02
            }
        )
        starts.append(len(out))
        out += rec
    return bytes(out), starts, regions


CARRYING = _chunk(prop_crc=True)
PLAIN = _chunk(prop_crc=False)


def _flipped(data: bytes, at: int, bit: int) -> bytes:
    buf = bytearray(data)
    buf[at] ^= 1 << bit
    return bytes(buf)


@pytest.mark.parametrize("walk", WALKS.values(), ids=WALKS.keys())
def test_a_clean_chunk_carrying_the_property_passes(walk):
    data, _starts, _regions = CARRYING
    issues, queues, records = walk(data, 0, FILE_SIZE, "n")
    assert issues == [] and records == N
    assert queues == {("OrdersTopic", 0): [0, N // 2 - 1], ("OrdersTopic", 1): [0, N // 2 - 1]}


@settings(max_examples=120, deadline=None)
@given(
    index=st.integers(0, N - 1),
    where=st.sampled_from(["header", "topic", "properties", "digits"]),
    pick=st.integers(0, 10_000),
    bit=st.integers(0, 6),  # ASCII text stays ASCII: the flip is caught by the CRC, not UTF-8
)
def test_a_flip_outside_the_body_is_a_damaged_record_at_its_offset(index, where, pick, bit):
    data, starts, regions = CARRYING
    region = regions[index][where]
    at = starts[index] + region[pick % len(region)]
    bad = _flipped(data, at, bit)
    slow = check_slow(bad, 0, FILE_SIZE, "n")
    for name, walk in WALKS.items():
        assert walk(bad, 0, FILE_SIZE, "n") == slow, name
    here = [i for i in slow[0] if i[0] == starts[index]]
    assert "record_crc_mismatch" in [i[1] for i in here], (where, at, slow[0])
    crc = next(i for i in here if i[1] == "record_crc_mismatch")
    assert crc[3] is not None and crc[8] != crc[7]  # names the record; expected != found


@pytest.mark.parametrize("walk", WALKS.values(), ids=WALKS.keys())
def test_a_body_flip_is_one_body_crc_finding(walk):
    data, starts, _regions = CARRYING
    bad = _flipped(data, bytes(data).index(b"body-0007|"), 0)
    assert [i[1] for i in walk(bad, 0, FILE_SIZE, "n")[0]] == ["crc_mismatch"]


@pytest.mark.parametrize("walk", WALKS.values(), ids=WALKS.keys())
def test_records_without_the_property_are_judged_as_before(walk):
    # a FLAG flip is no finding without the property (nothing covers it), one with it
    data, starts, _regions = PLAIN
    assert walk(_flipped(data, starts[5] + 16, 0), 0, FILE_SIZE, "n")[0] == []
    data, starts, _regions = CARRYING
    issues = walk(_flipped(data, starts[5] + 16, 0), 0, FILE_SIZE, "n")[0]
    assert [(i[0], i[1]) for i in issues] == [(starts[5], "record_crc_mismatch")]


@pytest.mark.parametrize("walk", WALKS.values(), ids=WALKS.keys())
def test_a_flip_in_the_property_key_leaves_a_record_without_it(walk):
    # where a record says it carries the CRC (the key and its separator): a flip there makes
    # it one that does not, judged as a record without the property (a known blind spot of
    # the format: RocketMQ's checkMessageAndReturnSize looks for the key the same way)
    data, starts, _regions = CARRYING
    end = starts[3 + 1]
    key_at = end - CRC32_RESERVED_LEN
    for at in (key_at - 1, key_at, key_at + 8):
        assert walk(_flipped(data, at, 0), 0, FILE_SIZE, "n")[0] == [], at


@pytest.mark.parametrize("walk", WALKS.values(), ids=WALKS.keys())
def test_a_record_ending_with_three_zero_bytes_is_torn(walk):
    data, starts, _regions = CARRYING
    buf = bytearray(data)
    end = starts[9 + 1]
    buf[end - CRC32_RESERVED_LEN : end] = bytes(CRC32_RESERVED_LEN)  # zeros from the key on
    issues = walk(bytes(buf), 0, FILE_SIZE, "n")[0]
    assert [(i[0], i[1]) for i in issues] == [(starts[9], "record_crc_mismatch")]
    assert "torn" in issues[0][2]


@pytest.mark.parametrize("walk", WALKS.values(), ids=WALKS.keys())
def test_a_torn_separator_after_the_digits_is_named_as_a_torn_value(walk):
    """The CRC property's last byte (``\\x02``) changed: the digits still match, so the
    finding names the torn value, not "expected X != found X" (Hypothesis found it)."""
    data, starts, _regions = CARRYING
    at = starts[1] - 1  # record 0's last byte
    bad = _flipped(data, at, 0)
    issues, _queues, _records = walk(bad, 0, FILE_SIZE, "n")
    crc = next(i for i in issues if i[0] == 0 and i[1] == "record_crc_mismatch")
    assert crc[7] == "ten digits and \\x02" and crc[8].endswith("\\x03"), crc
    assert "value torn" in crc[2]
