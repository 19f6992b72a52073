"""``haproof store dump`` on real RocketMQ stores and on corrupt copies (a real subprocess)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from contracts.record.ids import message_id
from contracts.record.reader import scan_records


def dump(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "store", "dump", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def lines(out: str) -> list[dict]:
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def test_four_file_store(golden_stores) -> None:
    res = dump(str(golden_stores / "EricPanGopher_rocketmq_unit_test_store"))
    assert res.returncode == 0, res.stderr
    recs = lines(res.stdout)
    msgs = [r for r in recs if not r.get("blank")]
    blanks = [r for r in recs if r.get("blank")]
    assert len(msgs) == 179
    assert [r["queueOffset"] for r in msgs] == list(range(179))
    assert all(r["crcOk"] for r in msgs)
    # every full file ends in a BLANK record reaching the file end
    assert [b["physicalOffset"] + b["size"] for b in blanks] == [8192, 16384, 24576]
    first = msgs[0]
    assert first["topic"] == "abc" and first["properties"]["TAGS"] == "TAG1"
    assert first["msgId"] == message_id(*first["storeHost"].split(":")[:1], 8123, 0)


@pytest.mark.parametrize(
    "name",
    [
        "Shaoxubao_rocketmq-study/store_unit_test_store_commitlog_00000000000000000000",
        "lidaxia2020_rocketmq-all-4.8.0-source-rele/unit_test_store_commitlog_00000000000000000000",
        "2013040101179_rocketmq-4.7.1-user-delay-test/unit_test_store_commitlog_00000000000000000000",
    ],
)
def test_single_golden_files(golden_stores, name: str) -> None:
    res = dump(str(golden_stores / name))
    assert res.returncode == 0, res.stderr
    recs = lines(res.stdout)
    assert len([r for r in recs if not r.get("blank")]) == 47
    assert recs[-1]["blank"] and recs[-1]["physicalOffset"] + recs[-1]["size"] == 8192


def _copy_store(golden_stores, tmp_path):
    dst = tmp_path / "store"
    shutil.copytree(golden_stores / "EricPanGopher_rocketmq_unit_test_store", dst)
    for p in dst.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return dst


def test_flipped_body_byte_exits_1_naming_the_offset(golden_stores, tmp_path) -> None:
    store = _copy_store(golden_stores, tmp_path)
    f = store / "commitlog" / "00000000000000008192"
    data = bytearray(f.read_bytes())
    rec = next(scan_records(bytes(data), base_offset=8192))
    pos = data.index(b"Once, there was", 0)
    data[pos] ^= 0x20
    f.write_bytes(bytes(data))
    res = dump(str(store))
    assert res.returncode == 1
    assert f"body CRC mismatch at offset {rec.physical_offset}" in res.stderr
    bad = [r for r in lines(res.stdout) if r.get("crcOk") is False]
    assert [r["physicalOffset"] for r in bad] == [8192]


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        (lambda d: d[:4] + b"\x00\x00\x00\x01" + d[8:], "bad magic"),
        (lambda d: b"\x00\x01\x00\x00" + d[4:], "runs past the end"),
    ],
)
def test_structural_corruption_names_file_offset_reason(golden_stores, tmp_path, patch, reason):
    store = _copy_store(golden_stores, tmp_path)
    f = store / "commitlog" / "00000000000000016384"
    f.write_bytes(patch(f.read_bytes()))
    res = dump(str(store))
    assert res.returncode == 1
    assert "00000000000000016384" in res.stderr and "offset 16384" in res.stderr
    assert reason in res.stderr


def test_truncated_file_in_the_middle_is_reported(golden_stores, tmp_path) -> None:
    store = _copy_store(golden_stores, tmp_path)
    f = store / "commitlog" / "00000000000000008192"
    data = f.read_bytes()
    f.write_bytes(data[:1000] + bytes(len(data) - 1000))
    res = dump(str(store))
    assert res.returncode == 1
    assert "without a BLANK record" in res.stderr


def test_a_zero_filled_page_in_a_file_stops_the_dump_with_exit_1(golden_stores, tmp_path) -> None:
    store = _copy_store(golden_stores, tmp_path)
    f = store / "commitlog" / "00000000000000016384"  # a page of zeros inside a file
    data = bytearray(f.read_bytes())
    data[172 : 172 + 4096] = bytes(4096)  # from the second record on, one page of zeros
    f.write_bytes(bytes(data))
    res = dump(str(store))
    assert res.returncode == 1, res.stderr
    assert "later bytes of this file hold data" in res.stderr


def test_a_deleted_middle_file_stops_the_dump_with_exit_1(golden_stores, tmp_path) -> None:
    store = _copy_store(golden_stores, tmp_path)
    (store / "commitlog" / "00000000000000008192").unlink()
    res = dump(str(store))
    assert res.returncode == 1, res.stderr
    assert "hole" in res.stderr and "[8192, 16384)" in res.stderr


def test_config_files_are_printed(golden_stores, tmp_path) -> None:
    store = tmp_path / "s"
    (store / "config").mkdir(parents=True)
    (store / "commitlog").mkdir()
    src = golden_stores / "Shaoxubao_rocketmq-study"
    shutil.copy(src / "store_config_consumerOffset.json", store / "config/consumerOffset.json")
    shutil.copy(
        src / "store_unit_test_store_commitlog_00000000000000000000",
        store / "commitlog" / ("0" * 20),
    )
    res = dump(str(store), "--config")
    assert res.returncode == 0, res.stderr
    cfg = [r for r in lines(res.stdout) if "config" in r]
    assert (
        cfg[0]["content"]["offsetTable"]["TopicTest@please_rename_unique_group_name_4"]["0"] == 250
    )


def test_missing_directory_is_a_usage_error(tmp_path) -> None:
    res = dump(str(tmp_path / "nope"))
    assert res.returncode == 2 and "no such file" in res.stderr
