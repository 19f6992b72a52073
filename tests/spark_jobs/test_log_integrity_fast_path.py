"""The fast record walk agrees with the full decoder (no Spark needed)."""

from __future__ import annotations

import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import _walk_nb as fastscan
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
    here = [i[1] for i in issues if i[0] == r.wrote_offset]
    assert expected_check in here
    # a header field the body CRC does not cover is covered by the record CRC property
    assert ("record_crc_mismatch" in here) == (field in ("physical", "queue"))


needs_numba = pytest.mark.skipif(not fastscan.available(), reason="numba is not installed")


@needs_numba
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=6000), skip=st.integers(0, 63))
def test_the_walks_body_crc_is_zlibs_at_any_length_and_alignment(data, skip):
    from contracts import _walk_nb_kernels as kernels

    buf = np.frombuffer(bytes(skip) + data, np.uint8)
    assert kernels.crc32_at(buf.ctypes.data + skip, len(data)) == zlib.crc32(data)


@needs_numba
def test_the_compiled_walk_takes_a_clean_log_and_refuses_a_flipped_body_byte(log):
    from contracts import _walk_nb_kernels as kernels

    assert kernels.CRC32_LIBRARY == "libdeflate"  # the audit extra installs the deflate wheel
    data, results = log
    fast = fastscan.scan(data, 0, FILE_SIZE)
    assert fast is not None and fast[0] == check_chunk_py(data, 0, FILE_SIZE, "n")[2]
    r = results[77]
    buf = bytearray(data)
    buf[data.index(b"msg-77msg-77", r.wrote_offset) + 3] ^= 0x10
    assert fastscan.scan(bytes(buf), 0, FILE_SIZE) is None  # the CRC caught it


@needs_numba
def test_without_the_deflate_wheel_the_compiled_walk_calls_zlib(log):
    """The compiled code is cached on disk under one symbol name: the same cached kernels must
    run on zlib's crc32 when libdeflate's is not installed."""
    data, _ = log
    code = (
        "import sys\n"
        "sys.modules['deflate'] = None  # as if the wheel were not installed\n"
        "from contracts import _walk_nb as fastscan, _walk_nb_kernels as k\n"
        "data = sys.stdin.buffer.read()\n"
        "fast = fastscan.scan(data, 0, int(sys.argv[1]))\n"
        "bad = bytearray(data); bad[int(sys.argv[2])] ^= 0x10\n"
        "print(k.CRC32_LIBRARY, fast is not None and fast[0], "
        "fastscan.scan(bytes(bad), 0, int(sys.argv[1])) is None)\n"
    )
    body_at = data.index(b"msg-77msg-77") + 3
    res = subprocess.run(
        [sys.executable, "-c", code, str(FILE_SIZE), str(body_at)],
        input=data,
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    records = check_chunk_py(data, 0, FILE_SIZE, "n")[2]
    assert res.stdout.decode().split() == ["zlib", str(records), "True"]
