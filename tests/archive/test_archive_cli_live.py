"""``haproof archive`` as a real process: killed during a multipart upload, and ``--follow``
on a store that keeps growing while it runs (stopped with SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid

from broker.archive.shipper import NodeIdentity, Shipper
from broker.archive.sources import StoreDirSource
from broker.config import BrokerConfig
from broker.store.message_store import MessageStore
from contracts import archive_layout as layout
from contracts.object_store import open_store
from contracts.record.model import Message
from tests.archive.live import CLUSTER, GROUP, archived_bytes, archived_end, log_bytes, wait_for
from tests.support.haproof_cli import archive_argv
from tools.s3server import DUMMY_CREDENTIALS

MiB = 1024 * 1024


def _archive_cmd(store_dir, root, *extra) -> list[str]:
    return archive_argv(store_dir, root, CLUSTER, GROUP, "a", *extra)


def _put(store: MessageStore, n: int, body_bytes: int, tag: str) -> None:
    futures = [
        store.put_message(
            Message(
                "ArchTopic", (tag.encode() + os.urandom(body_bytes))[:body_bytes], queue_id=i % 4
            )
        )
        for i in range(n)
    ]
    for f in futures:
        f.result()


def test_kill9_during_a_multipart_upload_leaves_no_visible_chunk_and_a_rerun_completes(
    tmp_path, s3_server
) -> None:
    store_dir = tmp_path / "store"
    cfg = BrokerConfig(store_path_root_dir=str(store_dir), mapped_file_size_commit_log=64 * MiB)
    store = MessageStore.open(cfg)
    store.start()
    _put(store, 30_000, 1024, "big")  # ~ 33 MiB: one chunk, seven 5 MiB parts
    store.shutdown()
    data = log_bytes(store_dir)
    assert len(data) > 30 * MiB

    bucket = "mp-" + uuid.uuid4().hex[:8]
    s3_server.create_bucket(bucket)
    root = f"s3://{bucket}/x"
    client = s3_server.client()
    cmd = _archive_cmd(
        store_dir,
        root,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--chunk-max-bytes",
        str(64 * MiB),
        "--part-size-bytes",
        str(5 * MiB),
    )
    env = {**os.environ, **DUMMY_CREDENTIALS}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:

        def parts_uploaded() -> int:
            ups = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
            if not ups:
                return 0
            up = ups[0]
            parts = client.list_parts(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
            return len(parts.get("Parts", []))

        wait_for(lambda: parts_uploaded() >= 1, what="a part uploaded", every_s=0.01)
        proc.kill()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        proc.stderr.close()
    upload = client.list_multipart_uploads(Bucket=bucket)["Uploads"][0]
    parts = client.list_parts(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    assert 1 <= len(parts["Parts"]) < 7, "the kill must land in the middle of the upload"
    assert upload["Key"].endswith(".log")

    visible = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert not [k for k in visible if "/commitlog/" in k], visible  # no partial chunk, no manifest

    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    archive = open_store(root, **s3_server.store_options())
    assert archived_bytes(archive, "a") == data
    (man,) = [
        layout.ChunkManifest.from_json(archive.get(o.key))
        for o in archive.list(layout.node_prefix(CLUSTER, GROUP, "a") + "commitlog/")
        if o.key.endswith(".json")
    ]
    assert man.start == 0 and man.end == len(data) and man.records == 30_000


def test_follow_ships_a_growing_store_and_stops_cleanly_on_sigterm(tmp_path) -> None:
    store_dir = tmp_path / "store"
    cfg = BrokerConfig(store_path_root_dir=str(store_dir), mapped_file_size_commit_log=64 * 1024)
    store = MessageStore.open(cfg)
    store.start()
    archive_dir = tmp_path / "archive"
    archive = open_store(f"file://{archive_dir}")
    cmd = _archive_cmd(store_dir, f"file://{archive_dir}", "--follow", "--interval-ms", "100")
    err_path = tmp_path / "archive.err"
    proc = None
    try:
        _put(store, 100, 300, "first")
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(cmd, stderr=err, stdout=subprocess.DEVNULL)
        wait_for(
            lambda: archived_end(archive, "a") >= len(log_bytes(store_dir)) > 0,
            what="the first messages followed",
        )
        first_end = archived_end(archive, "a")
        # the store grows while the follower runs: writes land during its rounds
        for round_no in range(8):
            _put(store, 60, 300, f"grow{round_no}")
        assert len(log_bytes(store_dir)) > 3 * 64 * 1024  # into new commit log files
        wait_for(
            lambda: archived_end(archive, "a") >= len(log_bytes(store_dir)),
            what="the grown store followed",
        )
        assert archived_end(archive, "a") > first_end
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, err_path.read_text()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(30)
        store.shutdown()
    data = log_bytes(store_dir)
    assert archived_bytes(archive, "a") == data
    prefix = layout.node_prefix(CLUSTER, GROUP, "a")
    snaps = [o.key for o in archive.list(prefix + "snapshots/")]
    last = layout.Snapshot.from_json(archive.get(snaps[-1]))
    assert sum(last.queueMaxOffsets["ArchTopic"].values()) == 100 + 8 * 60
    assert last.maxPhyOffset == len(data)
    kinds = [json.loads(archive.get(o.key))["kind"] for o in archive.list(prefix + "events/")]
    assert kinds == ["started"]
    text = err_path.read_text()
    assert "corrupt" not in text and "CRC" not in text, text


def test_follow_cap_never_reads_a_record_still_being_copied(tmp_path) -> None:
    store_dir = tmp_path / "store"
    cfg = BrokerConfig(store_path_root_dir=str(store_dir), mapped_file_size_commit_log=64 * 1024)
    store = MessageStore.open(cfg)
    store.start()
    _put(store, 20, 200, "cap")
    store.shutdown()
    data = log_bytes(store_dir)
    last = len(data) - len(log_bytes_of_last_record(data))
    path = store_dir / "commitlog" / f"{0:020d}"
    raw = bytearray(path.read_bytes())
    raw[last + 8 : len(data)] = bytes(len(data) - last - 8)  # head copied, the rest not yet
    path.write_bytes(bytes(raw))

    src = StoreDirSource.open(str(store_dir))
    assert src.written_end(0) == last  # the half-copied record is not "written"
    src.cap = src.written_end(0)
    archive = open_store(f"file://{tmp_path}/archive")
    shipped = Shipper(archive, NodeIdentity(CLUSTER, GROUP, "a")).ship(src)
    assert shipped.end == last and shipped.stopped_by is None and not shipped.crc_failures

    path.write_bytes(bytes(raw[:last]) + data[last:] + bytes(len(raw) - len(data)))
    src.refresh()
    assert src.written_end(last) == len(data)  # the copy finished
    src.cap = len(data)
    rest = Shipper(archive, NodeIdentity(CLUSTER, GROUP, "a")).ship(src)
    assert rest.start == last and rest.end == len(data) and not rest.crc_failures
    assert archived_bytes(archive, "a") == data
    src.close()


def log_bytes_of_last_record(data: bytes) -> bytes:
    from contracts.record.reader import scan_records

    recs = list(scan_records(data, with_body=False))
    return data[recs[-1].physical_offset :]
