"""The one record walk (contracts/_walk_valid.py): each reader's options on the same bytes."""

from __future__ import annotations

from contracts.errors import CorruptRecordError
from contracts.record.builder import encode_blank, encode_message
from contracts.record.layout import I64, OFFSET_PHYSICALOFFSET
from contracts.record.model import Message
from contracts.record_walk import record_scanner, walk_in_place, walk_valid

FILE = 4096


def _file(n: int = 3, closed: bool = True) -> tuple[bytearray, list[int]]:
    buf, starts, pos = bytearray(FILE), [], 0
    for i in range(n):
        enc = encode_message(Message("T", b"x" * 50, queue_id=0), ("127.0.0.1", 10911))
        data = enc.stamp(i, pos, 1_700_000_000_000 + i)
        buf[pos : pos + len(data)] = data
        starts.append(pos)
        pos += len(data)
    if closed:
        buf[pos:] = encode_blank(FILE - pos)
    return buf, starts


def test_frames_budget_and_blank() -> None:
    buf, starts = _file()
    size = starts[1]
    end, n, last, why = walk_in_place(buf, 0, base_offset=0, limit=FILE, budget=size)
    assert (end, n, last, why) == (starts[1], 1, 0, "budget")
    end, n, last, why = walk_in_place(buf, 0, base_offset=0, limit=FILE, budget=0, take_first=False)
    assert (end, n, why) == (0, 0, "budget")
    end, n, last, why = walk_in_place(buf, 0, base_offset=0, limit=FILE, file_end=FILE)
    assert (end, n, last, why) == (FILE, 4, starts[2], "blank")


def test_a_record_past_the_limit_is_the_end_only_for_a_live_log() -> None:
    buf, starts = _file(closed=False)
    cut = starts[2] + 10
    assert walk_in_place(buf, 0, base_offset=0, limit=cut, partial_is_end=True)[3] == "end"
    why = walk_in_place(buf, 0, base_offset=0, limit=cut)[3]
    assert isinstance(why, CorruptRecordError) and why.offset == starts[2]


def test_a_record_at_the_wrong_offset_stops_recovery_not_the_shipper() -> None:
    buf, starts = _file()
    I64.pack_into(buf, starts[1] + OFFSET_PHYSICALOFFSET, 999)
    pos, reason, closed = walk_valid(buf, 0, base_offset=0, limit=FILE)
    assert (pos, closed) == (starts[1], False)
    assert reason == f"record at {starts[1]} says it is at 999"
    seen = []
    end, n, _last, why = walk_in_place(
        buf, 0, base_offset=0, limit=FILE, decode=record_scanner(), on_record=seen.append
    )
    assert (end, n, why) == (FILE, 4, "blank") and len(seen) == 3


def test_a_crc_failure_is_reported_by_the_scan_and_stops_a_checked_walk() -> None:
    buf, starts = _file()
    buf[starts[0] + 100] ^= 0xFF  # inside the first body
    seen = []
    walk_in_place(buf, 0, base_offset=0, limit=FILE, decode=record_scanner(), on_record=seen.append)
    assert [r.crc_ok for r in seen] == [False, True, True]
    assert walk_valid(buf, 0, base_offset=0, limit=FILE)[1] == "body CRC mismatch at 0"
    assert walk_valid(buf, 0, base_offset=0, limit=FILE, check_crc=False)[2] is True
