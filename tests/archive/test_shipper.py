"""Shipping store directories: golden RocketMQ stores and our own, resumable and idempotent."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import pytest

from broker.archive.shipper import NodeIdentity, Shipper
from broker.archive.sources import StoreDirSource
from broker.config import BrokerConfig
from broker.store.message_store import MessageStore
from contracts import archive_layout as layout
from contracts.errors import ArchiveError
from contracts.object_store import open_store
from contracts.record.model import Message, Record
from contracts.record.reader import decode_record

ERIC = "EricPanGopher_rocketmq_unit_test_store"


def ident(**kw) -> NodeIdentity:
    return NodeIdentity(**{"cluster": "c1", "broker_name": "broker-a", "node": "n0", **kw})


def copy_golden(golden_stores, tmp_path):
    dst = tmp_path / "store"
    shutil.copytree(golden_stores / ERIC, dst)
    for p in dst.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return dst


def chunk_records(store, man: layout.ChunkManifest) -> list[Record]:
    key = layout.chunk_key("c1", "broker-a", man.node, man.start, man.end, man.epoch)
    data = store.get(key)
    assert hashlib.sha256(data).hexdigest() == man.sha256
    out, pos = [], 0
    while pos < len(data):
        rec = decode_record(data, pos, base_offset=man.start)
        out.append(rec)
        pos += rec.total_size
    assert pos == len(data)  # chunks end on record boundaries
    return out


def test_golden_store_ships_record_aligned_chunks(object_store, golden_stores) -> None:
    src = StoreDirSource.open(str(golden_stores / ERIC))
    assert src.mapped_file_size == 8192
    res = Shipper(object_store, ident(), chunk_max_bytes=5000).ship(src)
    assert res.stopped_by is None and not res.crc_failures
    assert res.start == 0 and res.end == 24576 + 38 * 172
    mans = res.chunks
    assert [c.start for c in mans[1:]] == [c.end for c in mans[:-1]]  # contiguous
    recs = [r for man in mans for r in chunk_records(object_store, man)]
    assert sum(man.records for man in mans) == len(recs) == 179 + 3  # 3 BLANK fillers
    assert [r.queue_offset for r in recs if not r.is_blank] == list(range(179))
    assert all(man.mappedFileSize == 8192 and man.role == "ASYNC_MASTER" for man in mans)
    assert res.queue_max_offsets == {"abc": {"0": 179}}


def test_reship_is_idempotent_and_growth_continues(tmp_path, golden_stores) -> None:
    store_dir = copy_golden(golden_stores, tmp_path)
    # start with only the first two files
    (store_dir / "commitlog" / "00000000000000016384").rename(tmp_path / "f3")
    (store_dir / "commitlog" / "00000000000000024576").rename(tmp_path / "f4")
    (store_dir / "commitlog" / "00000000000000032768").unlink()
    archive = open_store(f"file://{tmp_path}/archive")
    shipper = Shipper(archive, ident())
    first = shipper.ship(StoreDirSource.open(str(store_dir)))
    assert first.end == 16384
    again = shipper.ship(StoreDirSource.open(str(store_dir)))
    assert again.chunks == [] and again.end == 16384
    before = sorted(o.key for o in archive.list("v1/"))
    (tmp_path / "f3").rename(store_dir / "commitlog" / "00000000000000016384")
    (tmp_path / "f4").rename(store_dir / "commitlog" / "00000000000000024576")
    grown = shipper.ship(StoreDirSource.open(str(store_dir)))
    assert grown.start == 16384 and grown.end == 24576 + 38 * 172
    after = sorted(o.key for o in archive.list("v1/"))
    assert set(before) < set(after)


def test_a_log_without_manifest_is_shipped_again(tmp_path, golden_stores) -> None:
    archive = open_store(f"file://{tmp_path}/archive")
    shipper = Shipper(archive, ident())
    res = shipper.ship(StoreDirSource.open(str(golden_stores / ERIC)))
    last = res.chunks[-1]
    mkey = layout.manifest_key(layout.chunk_key("c1", "broker-a", "n0", last.start, last.end, 0))
    archive.delete(mkey)  # as if killed between the .log put and the manifest put
    again = shipper.ship(StoreDirSource.open(str(golden_stores / ERIC)))
    assert [(c.start, c.end) for c in again.chunks] == [(last.start, last.end)]
    assert archive.exists(mkey)


def test_flipped_body_byte_is_shipped_and_reported(tmp_path, golden_stores) -> None:
    store_dir = copy_golden(golden_stores, tmp_path)
    f = store_dir / "commitlog" / "00000000000000008192"
    data = bytearray(f.read_bytes())
    second = decode_record(bytes(data), 172, base_offset=8192)
    data[172 + second.total_size - 60] ^= 0x01  # inside the body of the record at 8364
    f.write_bytes(bytes(data))
    res = Shipper(open_store(f"file://{tmp_path}/a"), ident()).ship(
        StoreDirSource.open(str(store_dir))
    )
    assert res.crc_failures == [8192 + 172]
    assert res.end == 24576 + 38 * 172


def bad_magic_store(golden_stores, tmp_path):
    """The golden store with a bad magic on the 4th record of the file at 16384."""
    store_dir = copy_golden(golden_stores, tmp_path)
    f = store_dir / "commitlog" / "00000000000000016384"
    data = bytearray(f.read_bytes())
    data[172 * 3 + 4 : 172 * 3 + 8] = b"\x00\x00\x00\x07"
    f.write_bytes(bytes(data))
    return store_dir


def test_structural_corruption_stops_the_ship_before_it(tmp_path, golden_stores) -> None:
    store_dir = bad_magic_store(golden_stores, tmp_path)
    res = Shipper(open_store(f"file://{tmp_path}/a"), ident()).ship(
        StoreDirSource.open(str(store_dir))
    )
    assert res.stopped_by is not None and res.stopped_by.offset == 16384 + 172 * 3
    assert res.end == 16384 + 172 * 3


def test_a_shorter_log_than_the_archive_is_refused(tmp_path, golden_stores) -> None:
    archive = open_store(f"file://{tmp_path}/a")
    Shipper(archive, ident()).ship(StoreDirSource.open(str(golden_stores / ERIC)))
    store_dir = copy_golden(golden_stores, tmp_path)
    (store_dir / "commitlog" / "00000000000000024576").unlink()
    (store_dir / "commitlog" / "00000000000000032768").unlink()
    with pytest.raises(ArchiveError, match="truncated log"):
        Shipper(archive, ident()).ship(StoreDirSource.open(str(store_dir)))


def test_our_own_store_ships_byte_identical(tmp_path, s3_server, s3_root) -> None:
    cfg = BrokerConfig(
        store_path_root_dir=str(tmp_path / "ours"),
        mapped_file_size_commit_log=4096,
        mapped_file_size_consume_queue=400,
    )
    ms = MessageStore.open(cfg)
    for i in range(50):
        ms.put_message(Message("orders", bytes([i]) * 150, queue_id=i % 4)).result()
    ms.consumer_offsets.commit("g1", "orders", 0, 7)
    end = ms.max_phy_offset
    ms.shutdown()
    archive = open_store(s3_root, **s3_server.store_options())
    res = Shipper(archive, ident(node="ours-0"), chunk_max_bytes=3000).ship(
        StoreDirSource.open(str(tmp_path / "ours"))
    )
    assert res.end == end
    shipped = b"".join(
        archive.get(layout.chunk_key("c1", "broker-a", "ours-0", c.start, c.end, 0))
        for c in res.chunks
    )
    disk = b"".join(
        open(tmp_path / "ours" / "commitlog" / f"{o:020d}", "rb").read()
        for o in range(0, end, 4096)
    )
    assert shipped == disk[:end]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "archive", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_ships_golden_store_with_snapshot_and_started_event(tmp_path, golden_stores) -> None:
    store_dir = copy_golden(golden_stores, tmp_path)
    (store_dir / "config").mkdir()
    shutil.copy(
        golden_stores / "Shaoxubao_rocketmq-study" / "store_config_consumerOffset.json",
        store_dir / "config" / "consumerOffset.json",
    )
    root = f"file://{tmp_path}/archive"
    args = ["--store-dir", str(store_dir), "--root", root, "--cluster", "c1"]
    args += ["--broker-name", "broker-a", "--node", "rmq-a-0"]
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr
    assert "archive now ends at 31112" in res.stderr
    archive = open_store(root)
    keys = [o.key for o in archive.list("v1/c1/broker-a/rmq-a-0/")]
    events = [k for k in keys if "/events/" in k]
    snaps = [k for k in keys if "/snapshots/" in k]
    assert len(events) == 1 and events[0].endswith("-started.json")
    snap = layout.Snapshot.from_json(archive.get(snaps[0]))
    assert snap.maxPhyOffset == 31112 and snap.mappedFileSize == 8192
    assert snap.consumerOffsets["TopicTest@please_rename_unique_group_name_4"]["2"] == 250
    assert snap.queueMaxOffsets == {"abc": {"0": 179}}
    json.loads(archive.get(snaps[0]))  # strict JSON
    # a second run ships nothing new and adds no second started event
    res2 = run_cli(*args)
    assert res2.returncode == 0 and "0 new chunk(s)" in res2.stderr
    assert len([o for o in archive.list("v1/c1/broker-a/rmq-a-0/events/")]) == 1


def test_cli_exit_codes(tmp_path, golden_stores) -> None:
    res = run_cli(
        "--store-dir",
        str(tmp_path / "nope"),
        "--root",
        f"file://{tmp_path}/a",
        "--cluster",
        "c",
        "--broker-name",
        "b",
        "--node",
        "n",
    )
    assert res.returncode == 2 and "no such store directory" in res.stderr
    store_dir = copy_golden(golden_stores, tmp_path)
    f = store_dir / "commitlog" / "00000000000000008192"
    f.write_bytes(b"\x00\x00\x10\x00\xde\xad\xbe\xef" + f.read_bytes()[8:])
    res = run_cli(
        "--store-dir",
        str(store_dir),
        "--root",
        f"file://{tmp_path}/b",
        "--cluster",
        "c",
        "--broker-name",
        "b",
        "--node",
        "n",
    )
    assert res.returncode == 1
    assert "corrupt record at offset 8192" in res.stderr and "bad magic" in res.stderr


def test_kill9_mid_ship_then_rerun_leaves_a_consistent_archive(
    tmp_path, s3_server, s3_root
) -> None:
    import os
    import signal

    from tests.conftest import wait_until

    cfg = BrokerConfig(
        store_path_root_dir=str(tmp_path / "big"),
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 1000,
    )
    ms = MessageStore.open(cfg)
    body = os.urandom(4000)
    for _ in range(3000):  # ~12 MB over 12 files
        ms.put_message(Message("t", body)).result()
    end = ms.max_phy_offset
    ms.shutdown()
    env = dict(
        os.environ,
        **{
            k: v
            for k, v in (
                ("AWS_ACCESS_KEY_ID", s3_server.store_options()["access_key"]),
                ("AWS_SECRET_ACCESS_KEY", s3_server.store_options()["secret_key"]),
                ("AWS_DEFAULT_REGION", "us-east-1"),
            )
        },
    )
    args = [sys.executable, "-m", "broker.cli", "archive", "--store-dir", str(tmp_path / "big")]
    args += ["--root", s3_root, "--cluster", "c1", "--broker-name", "broker-a", "--node", "n0"]
    args += ["--endpoint-url", s3_server.endpoint_url, "--chunk-max-bytes", "300000"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    archive = open_store(s3_root, **s3_server.store_options())
    try:
        wait_until(
            lambda: sum(1 for o in archive.list("v1/") if o.key.endswith(".json")) >= 3,
            timeout_s=60,
            what="a few chunks shipped",
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    partial = Shipper(archive, ident()).archived_end()
    assert partial is not None and partial < end  # it really died mid-ship
    rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    mans = Shipper(archive, ident()).manifests()
    assert mans[0].start == 0 and mans[-1].end == end
    assert all(a.end == b.start for a, b in zip(mans, mans[1:], strict=False))
    data = b"".join(
        archive.get(layout.chunk_key("c1", "broker-a", "n0", c.start, c.end, 0)) for c in mans
    )
    disk = b"".join(
        open(tmp_path / "big" / "commitlog" / f"{o:020d}", "rb").read()
        for o in range(0, end, 1 << 20)
    )
    assert data == disk[:end]


def test_cli_missing_bucket_exits_1_without_leaking_credentials(
    tmp_path, golden_stores, s3_server
) -> None:
    import os

    store_dir = copy_golden(golden_stores, tmp_path)
    env = dict(os.environ)
    env.update(AWS_ACCESS_KEY_ID="AKIACLIKEY", AWS_SECRET_ACCESS_KEY="CLI-VERY-SECRET")
    env["AWS_DEFAULT_REGION"] = "us-east-1"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "archive",
            "--store-dir",
            str(store_dir),
            "--root",
            "s3://no-such-bucket-cli/x",
            "--endpoint-url",
            s3_server.endpoint_url,
            "--cluster",
            "c",
            "--broker-name",
            "b",
            "--node",
            "n",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 1, res.stderr
    assert "bucket no-such-bucket-cli does not exist" in res.stderr
    out = res.stdout + res.stderr
    assert "CLI-VERY-SECRET" not in out and "AKIACLIKEY" not in out


def test_truncation_keeps_old_chunks_and_continues_under_the_new_epoch(
    tmp_path, golden_stores
) -> None:
    archive = open_store(f"file://{tmp_path}/a")
    first = Shipper(archive, ident()).ship(StoreDirSource.open(str(golden_stores / ERIC)))
    assert first.end == 31112
    old_keys = [i.key for i in archive.list("")]
    store_dir = copy_golden(golden_stores, tmp_path)
    last = store_dir / "commitlog" / "00000000000000024576"
    kept = last.read_bytes()
    last.unlink()
    (store_dir / "commitlog" / "00000000000000032768").unlink()
    shipper = Shipper(archive, ident())
    with pytest.raises(ArchiveError, match="new epoch above 0"):
        shipper.record_truncation(24576, 0)
    key = shipper.record_truncation(24576, 1)
    doc = json.loads(archive.get(key))
    assert (doc["kind"], doc["from"], doc["to"], doc["epoch"]) == ("truncated", 31112, 24576, 1)
    assert Shipper(archive, ident(epoch=1)).archived_end() == 24576
    last.write_bytes(kept)  # the log grows again from the truncation point
    res = Shipper(archive, ident(epoch=1)).ship(StoreDirSource.open(str(store_dir)))
    assert (res.start, res.end) == (24576, 31112)
    assert all(c.epoch == 1 for c in res.chunks)
    assert set(old_keys) <= {i.key for i in archive.list("")}  # history stays immutable
    assert Shipper(archive, ident(epoch=1)).ship(StoreDirSource.open(str(store_dir))).chunks == []


class _Framed(StoreDirSource):
    """The same files, declared framed by their writer (as a live node's store is)."""

    framing_trusted = True


def _manifests(archive) -> list[dict]:
    out = []
    for info in archive.list("v1/"):
        if info.key.endswith(".json") and "/commitlog/" in info.key:
            doc = json.loads(archive.get(info.key))
            doc.pop("uploadedAt")
            out.append({"key": info.key, **doc})
    return out


@pytest.mark.parametrize("chunk_max_bytes", [172, 500, 5000, 8192 + 300, 1 << 20])
def test_framed_walk_cuts_the_same_chunks_as_the_full_walk(
    tmp_path, golden_stores, chunk_max_bytes
) -> None:
    """A live node's shipper chains frames instead of decoding records: same keys, byte ranges,
    record counts, first/last store timestamps and bytes as the full walk, across files and
    their BLANK fillers, for chunk sizes below one record up to the whole log."""
    full, framed = open_store(f"file://{tmp_path}/full"), open_store(f"file://{tmp_path}/fr")
    a = Shipper(full, ident(), chunk_max_bytes).ship(StoreDirSource.open(str(golden_stores / ERIC)))
    b = Shipper(framed, ident(), chunk_max_bytes).ship(_Framed.open(str(golden_stores / ERIC)))
    assert a.end == b.end == 24576 + 38 * 172 and b.stopped_by is None
    assert len(a.chunks) > (1 if chunk_max_bytes < 8192 else 0)
    assert _manifests(full) == _manifests(framed)
    logs = [i.key for i in full.list("v1/") if i.key.endswith(".log")]
    assert logs and all(framed.get(k) == full.get(k) for k in logs)


def test_framed_walk_ships_up_to_a_bad_frame_and_names_it(tmp_path, golden_stores) -> None:
    store_dir = bad_magic_store(golden_stores, tmp_path)
    res = Shipper(open_store(f"file://{tmp_path}/a"), ident(), 1000).ship(
        _Framed.open(str(store_dir))
    )
    assert res.stopped_by is not None and res.stopped_by.offset == 16384 + 172 * 3
    assert "magic" in str(res.stopped_by)
    assert res.end == 16384 + 172 * 3  # everything before it is archived


@pytest.mark.parametrize("cap", [24576 + 172 * 5 + 50, 8192 - 50])
def test_framed_walk_stops_before_a_record_not_wholly_flushed(tmp_path, golden_stores, cap) -> None:
    """A slave's flushed end can fall inside a record (or a file's BLANK filler): HA frames
    split records. That is the written end for now, not corruption: the records before it ship,
    no error, and the rest ships once complete."""
    archive = open_store(f"file://{tmp_path}/a")
    src = _Framed.open(str(golden_stores / ERIC))
    src.cap = cap
    res = Shipper(archive, ident(), 1 << 20).ship(src)
    assert res.stopped_by is None
    assert cap - 172 < res.end < cap  # the last whole record before the cap
    src.cap = None
    rest = Shipper(archive, ident(), 1 << 20).ship(src)
    assert (rest.start, rest.end, rest.stopped_by) == (res.end, 24576 + 38 * 172, None)
