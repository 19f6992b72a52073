"""The append fast path: batched group commit from asyncio, record bytes, msgIds, queues."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

from broker.config import FlushDiskType
from broker.store.flush import GroupCommitService
from broker.store.results import PutMessageStatus
from contracts.record.builder import encode_message
from contracts.record.ids import message_id
from contracts.record.layout import MAGIC_V1, MAGIC_V2, encode_host
from contracts.record.model import Message
from contracts.record.properties import properties_to_string
from contracts.record.reader import decode_record
from tests.conftest import wait_until


def _reference_encoding(msg: Message, store_host: tuple[str, int]) -> bytes:
    """The record built field by field with the spec's widths (no cached pieces)."""
    import struct
    import zlib

    topic_b = msg.topic.encode()
    props_b = properties_to_string(msg.properties).encode()
    born_b, born_v6 = encode_host(*msg.born_host)
    store_b, store_v6 = encode_host(*store_host)
    sysflag = msg.sysflag | (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    v2 = len(topic_b) > 127
    parts = [
        struct.pack(">I", MAGIC_V2 if v2 else MAGIC_V1),
        struct.pack(">i", zlib.crc32(msg.body) & 0x7FFFFFFF),
        struct.pack(">ii", msg.queue_id, msg.flag),
        struct.pack(">qq", 0, 0),
        struct.pack(">i", sysflag),
        struct.pack(">q", msg.born_timestamp),
        born_b,
        struct.pack(">q", 0),
        store_b,
        struct.pack(">iq", msg.reconsume_times, msg.prepared_transaction_offset),
        struct.pack(">i", len(msg.body)),
        msg.body,
        struct.pack(">h" if v2 else ">B", len(topic_b)),
        topic_b,
        struct.pack(">h", len(props_b)),
        props_b,
    ]
    rest = b"".join(parts)
    return struct.pack(">i", 4 + len(rest)) + rest


def test_encoding_matches_the_field_by_field_layout() -> None:
    cases = [
        (
            Message("orders", b"abc", queue_id=3, flag=9, properties={"TAGS": "A", "KEYS": "k"}),
            ("192.168.1.2", 10911),
        ),
        (Message("t" * 200, b"", born_host=("::1", 7), reconsume_times=2), ("fe80::1", 1)),
        (
            Message(
                "é-topic",
                bytes(range(256)),
                properties={"ü": "ß"},
                born_timestamp=5,
                prepared_transaction_offset=77,
                sysflag=0x2,
            ),
            ("10.0.0.1", 2),
        ),
    ]
    for msg, host in cases:
        enc = encode_message(msg, host)
        assert bytes(enc.data) == _reference_encoding(msg, host), msg.topic
        stamped = bytes(enc.stamp(11, 2222, 333))
        rec = decode_record(stamped, base_offset=2222)
        assert (rec.queue_offset, rec.stored_physical_offset, rec.store_timestamp) == (
            11,
            2222,
            333,
        )
        assert rec.properties == msg.properties and rec.body == msg.body and rec.crc_ok


def test_encoding_rejects_bad_topics_and_properties_by_name() -> None:
    for msg, word in (
        (Message("", b"x"), "topic"),
        (Message("t" * 40000, b"x"), "topic"),
        (Message("t", b"x", properties={"K": "v" * 40000}), "properties"),
    ):
        try:
            encode_message(msg, ("127.0.0.1", 1))
        except ValueError as exc:
            assert word in str(exc)
        else:
            raise AssertionError(f"{msg.topic[:10]!r} was accepted")


def test_put_results_carry_the_offset_msg_id_and_queue_offsets(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096)  # several file rolls
    store.start()
    host, port = store.config.store_host
    next_qo = {0: 0, 1: 0}
    for i in range(40):
        qid = i % 2
        r = store.put_message(Message("t", bytes([i]) * 300, queue_id=qid)).result(5)
        assert r.status is PutMessageStatus.PUT_OK
        assert r.msg_id == message_id(host, port, r.wrote_offset)
        assert r.queue_offset == next_qo[qid]
        next_qo[qid] += 1
        rec = store.commit_log.lookup(r.wrote_offset)
        assert rec.body == bytes([i]) * 300 and rec.queue_offset == r.queue_offset
        assert store.consume_queue("t", qid).max_offset_in_queue == next_qo[qid]
    assert len(store.commit_log.queue.files) > 3


def test_group_commit_batch_is_one_request_and_expires_as_one() -> None:
    release = threading.Event()
    answered: list[tuple[object, bool]] = []

    def hanging_flush() -> int:
        release.wait(10)
        return 0

    svc = GroupCommitService(hanging_flush, answered.extend, sync_flush_timeout_ms=50)
    svc.start()
    waiters = [Future() for _ in range(5)]

    class W:  # a waiter as the store passes it: done() plus whatever it completes
        def __init__(self, fut: Future) -> None:
            self.fut = fut

        def done(self) -> bool:
            return self.fut.done()

    batch = [(100 * (i + 1), W(f)) for i, f in enumerate(waiters)]
    svc.submit_many(batch)
    # the expiry thread answers the whole batch while the flush still hangs
    wait_until(lambda: len(answered) >= 5, what="the batch to expire")
    assert sorted(id(w) for w, _ in answered) == sorted(id(w) for _, w in batch)
    assert all(ok is False for _, ok in answered)
    release.set()
    svc.shutdown()


def test_asyncio_writers_share_fsyncs_and_are_acked_after_the_flush(open_store) -> None:
    store = open_store(
        flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1 << 20
    )
    store.start()
    seen_unflushed: list[int] = []

    async def writer(i: int) -> list:
        out = []
        for j in range(20):
            r = await store.put_message_async(Message("t", b"%d-%d" % (i, j), queue_id=i % 4))
            if r.end_offset > store.flushed_offset:
                seen_unflushed.append(r.end_offset)
            out.append(r)
        return out

    async def main() -> list:
        return await asyncio.gather(*(writer(i) for i in range(32)))

    results = [r for rs in asyncio.run(main()) for r in rs]
    assert len(results) == 640
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    assert seen_unflushed == []  # never acknowledged before the fsync covering it
    assert store._group_commit.fsyncs < len(results) // 4  # appends of a loop turn share one
    assert len({r.wrote_offset for r in results}) == 640


def test_asyncio_put_times_out_as_flush_disk_timeout(open_store, monkeypatch) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=50)
    gate = threading.Event()
    real_flush = store.commit_log.flush

    def slow_flush(least_pages: int = 0) -> int:
        gate.wait(10)
        return real_flush(least_pages)

    monkeypatch.setattr(store.commit_log, "flush", slow_flush)
    store.start()

    async def main() -> list:
        return await asyncio.gather(
            *(store.put_message_async(Message("t", b"x")) for _ in range(3))
        )

    try:
        results = asyncio.run(main())
    finally:
        gate.set()
    assert [r.status for r in results] == [PutMessageStatus.FLUSH_DISK_TIMEOUT] * 3


def test_cancelling_one_asyncio_writer_leaves_the_others_acked(open_store, monkeypatch) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=10_000)
    gate = threading.Event()
    real_flush = store.commit_log.flush
    entered = threading.Event()

    def gated_flush(least_pages: int = 0) -> int:
        entered.set()
        gate.wait(10)
        return real_flush(least_pages)

    monkeypatch.setattr(store.commit_log, "flush", gated_flush)
    store.start()

    async def main():
        tasks = [
            asyncio.ensure_future(store.put_message_async(Message("t", b"m%d" % i)))
            for i in range(4)
        ]
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, entered.wait, 10)
        tasks[1].cancel()
        gate.set()
        return await asyncio.gather(*tasks, return_exceptions=True)

    out = asyncio.run(main())
    assert isinstance(out[1], asyncio.CancelledError)
    assert [r.status for i, r in enumerate(out) if i != 1] == [PutMessageStatus.PUT_OK] * 3
