"""The record codec against RocketMQ facts and real RocketMQ files."""

from __future__ import annotations

import glob
import os
import struct
import zlib

import pytest

from contracts.errors import CorruptRecordError
from contracts.record.builder import encode_blank, encode_message
from contracts.record.ids import parse_message_id
from contracts.record.layout import (
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    encoded_length,
)
from contracts.record.model import Message
from contracts.record.properties import java_string_hash, properties_to_string, tags_hash_code
from contracts.record.reader import decode_record, scan_records

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "golden")
GOLDEN = os.path.normpath(GOLDEN)
STORE4 = os.path.join(GOLDEN, "rocketmq-store", "EricPanGopher_rocketmq_unit_test_store")


def _golden_files() -> list[str]:
    single = glob.glob(os.path.join(GOLDEN, "rocketmq-store", "*", "*commitlog_*"))
    multi = glob.glob(os.path.join(STORE4, "commitlog", "*"))
    return sorted(single + multi)


def test_magic_codes_are_rocketmqs() -> None:
    # Java ints: MESSAGE_MAGIC_CODE -626843481, V2 -626843477, BLANK -875286124
    assert struct.unpack(">i", struct.pack(">I", MAGIC_V1))[0] == -626843481
    assert struct.unpack(">i", struct.pack(">I", MAGIC_V2))[0] == -626843477
    assert struct.unpack(">i", struct.pack(">I", MAGIC_BLANK))[0] == -875286124


@pytest.mark.parametrize(
    ("s", "expected"),
    [("", 0), ("a", 97), ("TAG1", 2567159), ("TagA", 2598919), ("hello", 99162322)],
)
def test_java_string_hash(s: str, expected: int) -> None:
    assert java_string_hash(s) == expected


def test_java_string_hash_wraps_negative_and_utf16() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE, a well-known Java fact
    assert java_string_hash("polygenelubricants") == -(2**31)
    # a character outside the BMP hashes as its two UTF-16 code units
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00


def test_tags_hash_code_empty_is_zero() -> None:
    assert tags_hash_code(None) == 0
    assert tags_hash_code("") == 0


def test_golden_files_decode_and_verify() -> None:
    files = _golden_files()
    assert len(files) >= 8
    for path in files:
        data = open(path, "rb").read()
        start = int(os.path.basename(path)[-20:])
        recs = list(scan_records(data, base_offset=start, source=path))
        if not data:
            assert recs == []
            continue
        assert all(r.crc_ok for r in recs), path
        body = [r for r in recs if not r.is_blank]
        assert all(r.stored_physical_offset == r.physical_offset for r in body)
        assert all(r.topic == "abc" and r.tags == "TAG1" for r in body)


def test_four_file_store_has_179_messages_in_order() -> None:
    queue_offsets = []
    for path in sorted(glob.glob(os.path.join(STORE4, "commitlog", "*"))):
        data = open(path, "rb").read()
        recs = list(scan_records(data, base_offset=int(os.path.basename(path))))
        if len(data) and recs and recs[-1].is_blank:
            assert recs[-1].end == int(os.path.basename(path)) + len(data)
        queue_offsets += [r.queue_offset for r in recs if not r.is_blank]
    assert queue_offsets == list(range(179))


def test_golden_msg_id_is_store_host_plus_offset() -> None:
    path = os.path.join(STORE4, "commitlog", "00000000000000008192")
    rec = next(scan_records(open(path, "rb").read(), base_offset=8192))
    host, port, offset = parse_message_id(rec.msg_id)
    assert (host, port) == rec.store_host
    assert offset == 8192 == rec.stored_physical_offset
    assert len(rec.msg_id) == 32


def test_roundtrip_v1_and_properties() -> None:
    msg = Message(
        "orders",
        b"payload",
        queue_id=3,
        flag=7,
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"},
        born_timestamp=1_700_000_000_000,
        born_host=("10.1.2.3", 5555),
    )
    enc = encode_message(msg, ("192.168.0.9", 10911))
    data = bytes(
        enc.stamp(queue_offset=42, physical_offset=1000, store_timestamp=1_700_000_000_001)
    )
    rec = decode_record(data, base_offset=1000)
    assert rec.magic == MAGIC_V1
    assert (rec.topic, rec.queue_id, rec.flag, rec.queue_offset) == ("orders", 3, 7, 42)
    assert rec.properties == msg.properties
    assert rec.body == b"payload" and rec.crc_ok
    assert rec.body_crc == zlib.crc32(b"payload") & 0x7FFFFFFF
    assert rec.born_host == ("10.1.2.3", 5555) and rec.store_host == ("192.168.0.9", 10911)
    assert rec.store_timestamp == 1_700_000_000_001
    assert (
        rec.total_size
        == len(data)
        == encoded_length(6, 7, len(properties_to_string(msg.properties)))
    )
    assert enc.tags_code == java_string_hash("TagA")


def test_long_topic_uses_v2_and_ipv6_sets_sysflag() -> None:
    msg = Message("t" * 200, b"x", born_host=("::1", 1))
    data = bytes(encode_message(msg, ("fe80::1", 2)).data)
    rec = decode_record(data)
    assert rec.magic == MAGIC_V2 and rec.topic == "t" * 200
    assert rec.sysflag & SYSFLAG_BORNHOST_V6 and rec.sysflag & SYSFLAG_STOREHOST_V6
    assert len(rec.msg_id) == 56  # 16-byte address + port + offset


def _one() -> bytes:
    enc = encode_message(Message("abc", b"hello world"), ("127.0.0.1", 10911))
    return bytes(enc.stamp(0, 0, 1))


def test_flipped_body_byte_fails_crc_only() -> None:
    data = bytearray(_one())
    rec = decode_record(bytes(data))
    body_pos = data.index(b"hello world")
    data[body_pos] ^= 0x01
    rec = decode_record(bytes(data))
    assert not rec.crc_ok


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda d: d[:30], "runs past the end"),
        (lambda d: d[:4] + b"\x12\x34\x56\x78" + d[8:], "bad magic"),
        (lambda d: struct.pack(">i", 10_000) + d[4:], "runs past the end"),
        (lambda d: struct.pack(">i", 20) + d[4:], "below the minimum"),
    ],
)
def test_corrupt_records_name_offset_and_reason(mutate, reason: str) -> None:
    data = mutate(_one())
    with pytest.raises(CorruptRecordError) as exc:
        list(scan_records(data, base_offset=4096, source="cl/00000000000000004096"))
    assert exc.value.offset == 4096
    assert reason in str(exc.value)
    assert "cl/00000000000000004096" in str(exc.value)


def test_scan_stops_at_unwritten_zeroes_and_after_blank() -> None:
    one = _one()
    assert len(list(scan_records(one + bytes(100)))) == 1
    blank = encode_blank(64) + bytes(56)
    recs = list(scan_records(one + blank + one))
    assert [r.is_blank for r in recs] == [False, True]
    assert recs[1].end == len(one) + 64
