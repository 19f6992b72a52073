"""Group commit (SYNC_FLUSH) and the periodic flusher (ASYNC_FLUSH)."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from broker.config import FlushDiskType
from broker.store.flush import FlushRealTimeService, GroupCommitService
from broker.store.message_store import MessageStore
from broker.store.results import PutMessageResult, PutMessageStatus
from contracts.record.model import Message
from tests.support.aio import async_test, run_async
from tests.support.waiting import wait_for


def test_group_commit_shares_fsyncs_between_writers(open_store) -> None:
    store = open_store(
        flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1 << 20
    )
    store.start()
    n_threads, per_thread = 16, 25
    results: list[PutMessageResult] = []
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(per_thread):
            r = store.put_message(Message("t", b"z" * 64)).result(10)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=writer) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == n_threads * per_thread
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    # every acknowledged record is below the flushed offset
    assert max(r.end_offset for r in results) <= store.flushed_offset
    # group commit: fewer flushes than appends
    assert store._group_commit.fsyncs < len(results)


def test_group_commit_times_out_when_the_flush_hangs() -> None:
    release = threading.Event()
    flushed = [0]

    def hanging_flush() -> int:
        release.wait(10)
        return flushed[0]

    outcomes: list[bool] = []

    def on_flushed(batch: list[tuple[Future, bool]]) -> None:
        for fut, ok in batch:
            outcomes.append(ok)
            if not fut.done():
                fut.set_result(ok)

    svc = GroupCommitService(hanging_flush, on_flushed, sync_flush_timeout_ms=50)
    svc.start()
    fut: Future = Future()
    svc.submit(100, fut)
    assert fut.result(5) is False  # FLUSH_DISK_TIMEOUT while the flush still hangs
    release.set()
    svc.shutdown()
    assert outcomes[0] is False


def test_store_reports_flush_disk_timeout(open_store, monkeypatch) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=50)
    gate = threading.Event()
    real_flush = store.commit_log.flush

    def slow_flush(least_pages: int = 0) -> int:
        gate.wait(10)
        return real_flush(least_pages)

    monkeypatch.setattr(store.commit_log, "flush", slow_flush)
    store.start()
    r = store.put_message(Message("t", b"x")).result(5)
    assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert r.wrote_offset == 0  # the record was written, only its flush is unconfirmed
    gate.set()


def test_async_flusher_ticks_with_an_injected_clock() -> None:
    calls: list[int] = []

    def flush(least_pages: int) -> int:
        calls.append(least_pages)
        return 0

    now = [0]
    svc = FlushRealTimeService(
        flush, interval_ms=500, least_pages=4, thorough_interval_ms=10_000, clock_ms=lambda: now[0]
    )
    for t in range(500, 10_000, 500):
        svc.tick(t)
    assert calls and set(calls) == {4}  # only flush when 4 pages are dirty
    svc.tick(10_000)
    assert calls[-1] == 0  # thorough flush: everything, whatever the dirty pages
    svc.tick(10_500)
    assert calls[-1] == 4


@async_test
async def test_async_flusher_runs_by_ticks_of_a_driven_clock(driven_clock) -> None:
    """The flusher's thread waits on the clock: each interval of driven time is one round (the
    round's decision reads the same clock), and a stop ends the thread."""

    from tests.support.waiting import wait_for

    calls: list[int] = []
    svc = FlushRealTimeService(
        lambda least: calls.append(least) or 0,
        interval_ms=500,
        least_pages=4,
        thorough_interval_ms=1000,
        clock=driven_clock,
    )

    svc.start()
    try:
        await driven_clock.advance(500)
        await wait_for(lambda: calls == [4], 5000, what="the round at 500 ms")
        await driven_clock.advance(500)
        await wait_for(lambda: calls == [4, 0], 5000, what="the thorough round at 1000 ms")
    finally:
        svc.shutdown()
    assert not svc._thread.is_alive() and calls[-1] == 0  # the final flush at shutdown


def test_async_flush_respects_least_pages(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=1 << 20)
    store.put_message(Message("t", b"a" * 100)).result()
    assert store.flushed_offset == 0
    assert store._flush_commit_log(4) == 0  # under 4 dirty pages: nothing flushed
    for _ in range(200):
        store.put_message(Message("t", b"a" * 100)).result()
    assert store._flush_commit_log(4) == store.max_phy_offset


def test_sync_flush_group_commit_expires_by_the_driven_clock(make_config, driven_clock) -> None:
    """SYNC_FLUSH on a DrivenClock: a put whose flush hangs is answered FLUSH_DISK_TIMEOUT
    when the driven time passes sync_flush_timeout_ms, not before, and no wall time is spent on
    the minute it waits; once the disk answers, a put completes with no tick at all."""
    store = MessageStore.open(
        make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=60_000),
        clock=driven_clock,
    )
    gate = threading.Event()
    real_flush = store.commit_log.flush

    def gated_flush(least_pages: int = 0) -> int:
        gate.wait(30)
        return real_flush(least_pages)

    store.commit_log.flush = gated_flush
    store.start()

    async def drive() -> None:
        fut = store.put_message(Message("t", b"x"))
        await driven_clock.advance(59_999)
        assert not fut.done()  # within the timeout: still waiting for the disk
        await driven_clock.advance(1)
        r = await wait_for(fut.done, 5_000, what="the put to time out on the driven clock")
        assert r and fut.result().status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        gate.set()
        ok = store.put_message(Message("t", b"y"))
        await wait_for(ok.done, 5_000, what="a flushed put")
        assert ok.result().status is PutMessageStatus.PUT_OK

    try:
        run_async(drive)
    finally:
        gate.set()
        store.shutdown()


def test_load_makes_the_pages_a_killed_process_left_durable(tmp_path, monkeypatch) -> None:
    """A process killed before its flush leaves dirty pages in the page cache. Recovery counts
    them as flushed, so load must put them on disk first: else a power loss after the restart
    takes acknowledged bytes from the middle of the log (simulation seed 832176175)."""
    from broker.store import mapped_file
    from broker.store.mapped_file_queue import MappedFileQueue

    size = 4096
    first = MappedFileQueue.load(str(tmp_path), size)
    for _ in range(2):  # two files, both written through the mapping and never flushed
        first.last_file_for_append(first.max_offset).append(b"x" * size)
    assert [mf.flushed_position for mf in first.files] == [0, 0]
    synced: list[tuple[str, int, int]] = []
    monkeypatch.setattr(mapped_file, "durability_observer", lambda *a: synced.append(a))
    second = MappedFileQueue.load(str(tmp_path), size)  # the first never closed: killed
    assert sorted(synced) == sorted((mf.path, 0, size) for mf in second.files)
    assert len(synced) == 2
    second.close()
    first.close()
