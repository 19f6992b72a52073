"""The fast record walk agrees with the full decoder (no Spark needed)."""

from __future__ import annotations

import pytest

from contracts.record.layout import OFFSET_PHYSICALOFFSET, OFFSET_QUEUEOFFSET
from contracts.record_walk import check_chunk_nb, check_chunk_np, check_chunk_py
from contracts.record_walk import check_slow as _check_slow
from tests.spark_jobs.builder import FILE_SIZE, make_store

IMPLS = pytest.mark.parametrize(
    "check_chunk", [check_chunk_py, check_chunk_np, check_chunk_nb], ids=["py", "np", "numba"]
)


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> tuple[bytes, list]:
    path = tmp_path_factory.mktemp("fast") / "store"
    results = make_store(path, 120, queues=3)
    files = sorted((path / "commitlog").iterdir())
    data = b"".join(f.read_bytes() for f in files)
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    return data[:end], results


@IMPLS
def test_clean_log_fast_equals_slow(log, check_chunk) -> None:
    data, results = log
    fast = check_chunk(data, 0, FILE_SIZE, "n")
    slow = _check_slow(data, 0, FILE_SIZE, "n")
    assert fast == slow
    issues, queues, n = fast
    assert issues == []
    # every message plus one BLANK per full file
    blanks = results[-1].wrote_offset // FILE_SIZE
    assert n == len(results) + blanks
    assert queues[("orders", 1)] == [0, 39]


@IMPLS
def test_chunk_starting_mid_log_keeps_absolute_offsets(log, check_chunk) -> None:
    data, results = log
    r = results[50]
    chunk = data[r.wrote_offset :]
    issues, queues, _ = check_chunk(chunk, r.wrote_offset, FILE_SIZE, "n")
    assert issues == []
    assert queues[("orders", 50 % 3)][0] == r.queue_offset  # make_store: queue i % 3


@pytest.mark.parametrize(
    "field, expected_check",
    [
        ("body", "crc_mismatch"),
        ("physical", "physical_offset_mismatch"),
        ("queue", "queue_offset_gap"),
        ("size", "record_malformed"),
    ],
)
@IMPLS
def test_faults_fall_back_to_the_full_decoder_at_the_exact_offset(
    log, field, expected_check, check_chunk
):
    data, results = log
    r = results[77]
    buf = bytearray(data)
    if field == "body":
        body_pos = data.index(b"msg-77msg-77", r.wrote_offset)
        assert body_pos < r.wrote_offset + r.wrote_bytes
        buf[body_pos + 3] ^= 0x10
    elif field == "physical":
        pos = r.wrote_offset + OFFSET_PHYSICALOFFSET
        buf[pos : pos + 8] = (r.wrote_offset + 1).to_bytes(8, "big")
    elif field == "queue":
        pos = r.wrote_offset + OFFSET_QUEUEOFFSET
        buf[pos : pos + 8] = (r.queue_offset + 5).to_bytes(8, "big")
    else:
        buf[r.wrote_offset : r.wrote_offset + 4] = (r.wrote_bytes + 3).to_bytes(4, "big")
    fast = check_chunk(bytes(buf), 0, FILE_SIZE, "n")
    assert fast == _check_slow(bytes(buf), 0, FILE_SIZE, "n")
    issues = fast[0]
    assert issues, f"{field}: no issue found"
    assert issues[0][0] == r.wrote_offset
    assert issues[0][1] == expected_check
