"""Commit log and consume queues on small mapped files."""

from __future__ import annotations

import os
import struct

from broker.store.consume_queue import ENTRY
from broker.store.results import GetMessageStatus, PutMessageStatus
from contracts.record.ids import parse_message_id
from contracts.record.layout import MAGIC_V2
from contracts.record.model import Message
from contracts.record.properties import tags_hash_code
from contracts.record.reader import decode_record, scan_records


def put(store, topic="abc", body=b"x" * 100, queue_id=0, tags=None, keys=None):
    props = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    return store.put_message(Message(topic, body, queue_id=queue_id, properties=props)).result(5)


def test_records_cross_files_with_blank_fillers(open_store) -> None:
    store = open_store()
    results = [put(store, body=bytes([i % 256]) * 300, tags="T") for i in range(40)]
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    # every record sits wholly inside one 4096-byte file
    for r in results:
        assert r.wrote_offset // 4096 == (r.end_offset - 1) // 4096
    files = sorted(os.listdir(store.config.store_path_commit_log))
    assert files[0] == "0" * 20 and files[1] == "00000000000000004096"
    store.flush_all()
    # each full file ends with a BLANK record reaching exactly the file end
    for name in files[:-1]:
        data = open(os.path.join(store.config.store_path_commit_log, name), "rb").read()
        recs = list(scan_records(data, base_offset=int(name)))
        assert recs[-1].is_blank and recs[-1].end == int(name) + 4096
        assert all(r.crc_ok for r in recs)
    # queue offsets are contiguous and msgIds encode store host + offset
    assert [r.queue_offset for r in results] == list(range(40))
    host, port, off = parse_message_id(results[7].msg_id)
    assert (host, port, off) == ("127.0.0.1", 10911, results[7].wrote_offset)


def test_record_bytes_match_encoding(open_store) -> None:
    store = open_store()
    r = put(store, topic="orders", tags="TagA", keys="k1")
    rec = store.look_message_by_offset(r.wrote_offset)
    assert rec.topic == "orders" and rec.tags == "TagA" and rec.properties["KEYS"] == "k1"
    assert rec.stored_physical_offset == r.wrote_offset
    assert rec.store_timestamp == r.store_timestamp and rec.crc_ok


def test_long_topic_is_message_version_2(open_store) -> None:
    store = open_store()
    topic = "T" * 130
    r = put(store, topic=topic)
    rec = store.look_message_by_offset(r.wrote_offset)
    assert rec.magic == MAGIC_V2 and rec.topic == topic


def test_consume_queue_entries_and_tag_codes(open_store) -> None:
    store = open_store()
    rs = [put(store, queue_id=1, tags="TAG1" if i % 2 else None) for i in range(5)]
    cq_dir = os.path.join(store.config.store_path_root_dir, "consumequeue", "abc", "1")
    data = open(os.path.join(cq_dir, "0" * 20), "rb").read()
    entries = [ENTRY.unpack_from(data, i * 20) for i in range(5)]
    assert [(e[0], e[1]) for e in entries] == [(r.wrote_offset, r.wrote_bytes) for r in rs]
    assert [e[2] for e in entries] == [0, 2567159, 0, 2567159, 0]  # "TAG1".hashCode()
    assert store.get_max_offset_in_queue("abc", 1) == 5


def test_consume_queue_spans_files(open_store) -> None:
    store = open_store(mapped_file_size_consume_queue=20 * 4)
    for _ in range(10):
        put(store, body=b"y")
    names = sorted(os.listdir(os.path.join(store.config.store_path_root_dir, "consumequeue/abc/0")))
    assert names == ["00000000000000000000", "00000000000000000080", "00000000000000000160"]
    got = store.get_message("abc", 0, 3, 5)
    assert [decode_record(b).queue_offset for b in got.records] == [3, 4, 5, 6, 7]


def test_get_message_statuses(open_store) -> None:
    store = open_store()
    assert store.get_message("abc", 0, 0, 1).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    for _ in range(3):
        put(store)
    r = store.get_message("abc", 0, 0, 32)
    assert r.status is GetMessageStatus.FOUND and len(r.records) == 3
    assert (r.next_begin_offset, r.min_offset, r.max_offset) == (3, 0, 3)
    one = store.get_message("abc", 0, 3, 32)
    assert one.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 3
    bad = store.get_message("abc", 0, 9, 32)
    assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 3


def test_tag_filter_skips_and_advances(open_store) -> None:
    store = open_store()
    for i in range(6):
        put(store, tags="A" if i % 3 == 0 else "B")
    want = {tags_hash_code("A")}
    r = store.get_message("abc", 0, 1, 1, tag_codes=want)
    assert [decode_record(b).queue_offset for b in r.records] == [3]
    assert r.next_begin_offset == 4
    none = store.get_message("abc", 0, 4, 32, tag_codes={tags_hash_code("Z")})
    assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 6


def test_offset_by_time(open_store, make_config) -> None:
    from broker.store.message_store import MessageStore

    now = [1_000]
    store = MessageStore.open(make_config(), clock_ms=lambda: now[0])
    try:
        for _ in range(5):
            put(store)
            now[0] += 100
        assert store.get_offset_in_queue_by_time("abc", 0, 0) == 0
        assert store.get_offset_in_queue_by_time("abc", 0, 1_200) == 2
        assert store.get_offset_in_queue_by_time("abc", 0, 1_150) == 2
        assert store.get_offset_in_queue_by_time("abc", 0, 99_999) == 5
    finally:
        store.shutdown()


def test_rebuild_consume_queues_from_commit_log_alone(open_store, make_config) -> None:
    store = open_store()
    for i in range(30):
        put(store, queue_id=i % 3, tags=f"t{i % 2}")
    before = {q: store.get_message("abc", q, 0, 100).records for q in range(3)}
    store.shutdown()
    import shutil

    shutil.rmtree(os.path.join(make_config().store_path_root_dir, "consumequeue"))
    store2 = open_store()
    after = {q: store2.get_message("abc", q, 0, 100).records for q in range(3)}
    assert after == before and sum(len(v) for v in after.values()) == 30
    assert store2.rebuild_consume_queues() == 30
    assert {q: store2.get_message("abc", q, 0, 100).records for q in range(3)} == before
    # new appends continue the queue offsets
    assert put(store2, queue_id=2).queue_offset == 10


def test_slave_append_raw_dispatches_only_complete_records(open_store, tmp_path) -> None:
    master = open_store()
    for i in range(12):
        put(master, body=bytes(200), tags="x", queue_id=i % 2)
    raw = b"".join(
        master.read_commit_log(off, 4096) for off in range(0, master.max_phy_offset, 4096)
    )
    from broker.config import BrokerRole

    slave = open_store(
        store_path_root_dir=str(tmp_path / "slave"), broker_role=BrokerRole.SLAVE, broker_id=1
    )
    pos = 0
    for step in (100, 777, 1500, 10_000):  # batches not aligned to records
        chunk = raw[pos : pos + step]
        # never across a file end, as the HA protocol sends
        room = 4096 - (pos % 4096)
        chunk = chunk[:room]
        slave.append_raw(pos, chunk)
        pos += len(chunk)
        if step == 100:  # a partly received record is in the log, not yet in a consume queue
            assert slave.max_phy_offset == 100 and slave.dispatched_offset == 0
            assert not slave.is_dispatched(100)
    while pos < len(raw):
        chunk = raw[pos : pos + 4096 - (pos % 4096)]
        slave.append_raw(pos, chunk)
        pos += len(chunk)
    assert slave.max_phy_offset == master.max_phy_offset
    assert slave.dispatched_offset == slave.max_phy_offset and slave.is_dispatched(pos)
    assert not slave.is_dispatched(pos + 1)
    for q in range(2):
        assert (
            slave.get_message("abc", q, 0, 100).records
            == master.get_message("abc", q, 0, 100).records
        )
    # a slave takes no client writes
    assert put(slave).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_append_raw_must_continue_the_log(open_store) -> None:
    import pytest

    from contracts.errors import StoreError

    store = open_store()
    with pytest.raises(StoreError, match="log ends at 0"):
        store.append_raw(100, b"abc")


def test_truncate_dirty_drops_log_and_queue_tail(open_store) -> None:
    store = open_store()
    rs = [put(store, body=bytes(300)) for _ in range(20)]
    cut = rs[12].wrote_offset
    store.truncate_dirty(cut)
    assert store.max_phy_offset == cut
    assert store.get_max_offset_in_queue("abc", 0) == 12
    r = put(store)
    assert r.queue_offset == 12 and r.wrote_offset == cut


def test_oversized_and_illegal_messages(open_store) -> None:
    store = open_store(max_message_size_bytes=1000)
    assert put(store, body=bytes(2000)).status is PutMessageStatus.MESSAGE_ILLEGAL
    r = store.put_message(Message("t", b"x", properties={"K": "v" * 40000})).result()
    assert r.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED


def test_corrupt_consume_queue_file_size_is_reported(open_store, make_config) -> None:
    store = open_store()
    put(store)
    store.shutdown()
    path = os.path.join(make_config().store_path_root_dir, "consumequeue/abc/0", "0" * 20)
    with open(path, "ab") as fh:
        fh.write(struct.pack(">i", 1))
    import pytest

    from contracts.errors import StoreError

    with pytest.raises(StoreError, match="size"):
        open_store()
