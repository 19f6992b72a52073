"""Checkpoint and recovery: clean restarts, kill -9 of a real writer, torn tails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from broker.store.checkpoint import StoreCheckpoint
from broker.store.message_store import MessageStore
from contracts.record.builder import encode_message
from contracts.record.model import Message
from contracts.record.reader import decode_record


def test_kill9_under_sync_flush_loses_no_acknowledged_message(tmp_path, make_config) -> None:
    root = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "crash_writer.py"), str(root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acks = []
    try:
        for line in proc.stdout:
            acks.append(tuple(int(x) for x in line.split()))
            if len(acks) >= 600:  # several 64 KiB files
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert len(acks) >= 600
    assert os.path.exists(root / "abort")  # it crashed: no clean shutdown
    cfg = make_config(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 100,
    )
    store = MessageStore.open(cfg)
    try:
        assert store.recovery.abnormal
        for offset, size, w, i in acks:
            rec = store.look_message_by_offset(offset)
            assert rec.total_size == size and rec.crc_ok
            assert rec.body == f"w{w}-m{i}".encode() * 20
        # consume queues agree with the commit log, entry for entry
        total = 0
        for q in (0, 1):
            got = store.get_message("crash", q, 0, 100_000, max_bytes=1 << 30)
            qos = [decode_record(b).queue_offset for b in got.records]
            assert qos == list(range(len(qos)))
            total += len(qos)
        assert total >= len(acks)
        assert store.max_phy_offset >= max(o + s for o, s, _, _ in acks)
    finally:
        store.shutdown()


def _crash(store: MessageStore) -> None:
    store.flush_all()
    store.close_abruptly()


def test_torn_tail_is_truncated_and_reported(open_store, make_config) -> None:
    store = open_store()
    rs = [store.put_message(Message("t", b"q" * 200)).result() for _ in range(5)]
    end = rs[-1].end_offset
    # a half-written record after the end: a valid header whose body never made it
    partial = bytes(encode_message(Message("t", b"w" * 500), ("127.0.0.1", 1)).data)[:100]
    path = os.path.join(store.config.store_path_commit_log, "0" * 20)
    _crash(store)
    with open(path, "r+b") as fh:
        fh.seek(end)
        fh.write(partial)
    store2 = MessageStore.open(make_config())
    try:
        rep = store2.recovery
        assert rep.abnormal and rep.valid_end == end and rep.found_end == end + 100
        assert rep.dropped_bytes == 100
        with open(path, "rb") as fh:
            assert fh.read()[end : end + 100] == bytes(100)  # the torn bytes are gone
        assert store2.put_message(Message("t", b"n")).result().wrote_offset == end
        assert store2.get_max_offset_in_queue("t", 0) == 6
    finally:
        store2.shutdown()


def test_crc_mismatch_in_tail_truncates_there_after_a_crash(open_store, make_config) -> None:
    store = open_store()
    rs = [store.put_message(Message("t", b"q" * 200)).result() for _ in range(6)]
    path = os.path.join(store.config.store_path_commit_log, "0" * 20)
    _crash(store)
    with open(path, "r+b") as fh:
        fh.seek(rs[5].wrote_offset + rs[5].wrote_bytes - 50)  # inside the body of the last one
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0xFF]))
    store2 = MessageStore.open(make_config())
    try:
        assert store2.recovery.valid_end == rs[5].wrote_offset
        assert "CRC" in store2.recovery.reason and store2.recovery.damage is None
        assert store2.get_max_offset_in_queue("t", 0) == 5
    finally:
        store2.shutdown()


def test_clean_restart_is_normal_and_keeps_everything(open_store, make_config) -> None:
    store = open_store()
    for i in range(30):
        store.put_message(Message("t", bytes([i]) * 300, queue_id=i % 3)).result()
    end = store.max_phy_offset
    store.shutdown()
    assert not os.path.exists(os.path.join(make_config().store_path_root_dir, "abort"))
    cp = StoreCheckpoint.read(os.path.join(make_config().store_path_root_dir, "checkpoint"))
    assert cp.physic_msg_timestamp > 0 and cp.logics_msg_timestamp > 0
    store2 = open_store()
    assert not store2.recovery.abnormal
    assert store2.max_phy_offset == end
    assert [store2.get_max_offset_in_queue("t", q) for q in range(3)] == [10, 10, 10]


def test_an_empty_file_left_by_a_crash_as_it_was_created_is_dropped(
    open_store, make_config
) -> None:
    """kill -9 between creating a commit log or consume queue file and sizing it leaves a
    0-byte file at the end of its directory (CI saw one in a consume queue): no byte was written
    to it, so opening the store drops it instead of refusing to start; a 0-byte file anywhere
    else is still an error."""
    import pytest

    from contracts.errors import StoreError

    store = open_store()
    for i in range(30):
        store.put_message(Message("t", bytes([i]) * 300, queue_id=0)).result()
    end = store.max_phy_offset
    store.shutdown()
    root = make_config().store_path_root_dir
    cl, cq = os.path.join(root, "commitlog"), os.path.join(root, "consumequeue", "t", "0")
    next_cl = os.path.join(cl, f"{(end // 4096 + 1) * 4096:020d}")
    next_cq = os.path.join(cq, f"{max(int(n) for n in os.listdir(cq)) + 20 * 50:020d}")
    for path in (next_cl, next_cq):
        open(path, "wb").close()
    store2 = open_store()
    assert store2.max_phy_offset == end
    assert store2.get_max_offset_in_queue("t", 0) == 30
    assert not os.path.exists(next_cl) and not os.path.exists(next_cq)
    store2.put_message(Message("t", b"after", queue_id=0)).result()
    assert store2.get_max_offset_in_queue("t", 0) == 31
    store2.shutdown()
    first = os.path.join(cl, sorted(os.listdir(cl))[0])
    os.truncate(first, 0)  # not the last file: data is missing, refuse
    with pytest.raises(StoreError, match="size 0 differs"):
        open_store()


def test_second_process_cannot_open_a_locked_store(open_store, make_config) -> None:
    import pytest

    from contracts.errors import StoreError

    open_store()
    with pytest.raises(StoreError, match="in use"):
        MessageStore.open(make_config())


def test_golden_checkpoint_reads(golden_stores) -> None:
    cp = StoreCheckpoint.read(str(golden_stores / "Shaoxubao_rocketmq-study" / "store_checkpoint"))
    assert cp.physic_msg_timestamp == 0x0169_4421_7872 == cp.logics_msg_timestamp
    assert cp.index_msg_timestamp == 0
