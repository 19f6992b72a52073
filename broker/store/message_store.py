"""The store façade (RocketMQ DefaultMessageStore): one object a broker node talks to.

Layout under ``storePathRootDir``: ``commitlog/``, ``consumequeue/{topic}/{queueId}/``,
``config/*.json``, ``checkpoint``, ``abort`` (present while running: its presence at start means
the last run crashed) and ``lock`` (one process per store).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from broker.config import BrokerConfig, BrokerRole, FlushDiskType, parse_delay_levels
from broker.store import delay, recovery
from broker.store.checkpoint import StoreCheckpoint, atomic_write
from broker.store.commit_log import CommitLog, RecoveryReport
from broker.store.config_store import DelayOffsetTable, TableConfig
from broker.store.consume_queue import ConsumeQueue
from broker.store.consumer_offsets import ConsumerOffsetManager
from broker.store.dispatcher import Dispatcher, rebuild_consume_queues
from broker.store.flush import FlushRealTimeService, GroupCommitService
from broker.store.queries import QueryMixin
from broker.store.results import PutMessageResult, PutMessageStatus
from broker.store.startup import check_writable, offsets_restore_hint
from contracts import record as msgfmt
from contracts.errors import StoreError

log = logging.getLogger(__name__)

PutFuture = Future  # Future[PutMessageResult]
TRUNCATING = "truncating"  # marker file: a failover truncation in progress (its offset)
DispatchListener = Callable[[str, int, int], None]  # (topic, queue_id, new max queue offset)


_DONE_LOCK = threading.Condition()


class _CompletedFuture(Future):
    """A future born completed (ASYNC_FLUSH puts): skips creating a Condition per append."""

    def __init__(self, result: PutMessageResult):  # noqa: D107 - deliberately no super().__init__
        self._condition = _DONE_LOCK
        self._state = "FINISHED"
        self._result = result
        self._exception = None
        self._waiters = []
        self._done_callbacks = []

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> PutMessageResult:
        return self._result


class _Waiter:
    """A put from a thread waiting for its flush: the future to complete and its result."""

    __slots__ = ("future", "result")

    def __init__(self, future: Future, result: PutMessageResult):
        self.future = future
        self.result = result

    def done(self) -> bool:
        return self.future.done()


class _LoopBatch:
    """The puts one event loop made in one turn: a single group commit waiter for all of
    them (they are covered by the same flush), answered with one call into the loop."""

    __slots__ = ("loop", "futures", "results", "settled")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.futures: list[asyncio.Future] = []
        self.results: list[PutMessageResult] = []
        self.settled = False

    def done(self) -> bool:
        return self.settled

    def settle(self, flushed_ok: bool) -> None:
        """Runs in the loop: complete every put (FLUSH_DISK_TIMEOUT unless ``flushed_ok``)."""
        if self.settled:
            return
        self.settled = True
        for fut, result in zip(self.futures, self.results, strict=True):
            if not flushed_ok:
                result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
            if not fut.done():
                fut.set_result(result)


_PUT_OK = PutMessageStatus.PUT_OK


def time_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore(QueryMixin):
    def __init__(
        self, config: BrokerConfig, clock_ms: Callable[[], int], accept_offset_loss: bool = False
    ):
        self.config = config
        self.accept_offset_loss = accept_offset_loss
        self.clock_ms = clock_ms
        self.root = config.store_path_root_dir
        self.cq_root = os.path.join(self.root, "consumequeue")
        self.config_dir = os.path.join(self.root, "config")
        self.commit_log: CommitLog
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.checkpoint = StoreCheckpoint()
        self.recovery: RecoveryReport | None = None
        # quarantined ranges (repair, slave refetch) not yet reported as recovered events
        self.quarantine_reports: list[dict] = []
        self.put_lock = threading.Lock()
        self._listeners: list[DispatchListener] = []
        # flush requests queued by each event loop, handed to group commit once per loop turn
        self._loop_pending: dict[asyncio.AbstractEventLoop, _LoopBatch] = {}
        self._last_store_ts = 0
        self._lock_fd: int | None = None
        self._group_commit: GroupCommitService | None = None
        self._flusher: FlushRealTimeService | None = None
        self._cq_flusher: threading.Thread | None = None
        self._stop = threading.Event()
        self.running = False
        self.role: BrokerRole = config.broker_role  # changes at failover; config stays as read
        self.dispatcher: Dispatcher
        # schedule-topic entries carry their delivery time, derived from DELAY + store time
        self._tags_code = delay.record_tags_code(parse_delay_levels(config.message_delay_level))

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        config: BrokerConfig,
        *,
        clock_ms: Callable[[], int] = time_ms,
        accept_offset_loss: bool = False,
    ) -> MessageStore:
        """Lock the store directory, load every file and recover (normal or after a crash).
        Raises StoreError (one line naming what and where) and releases the directory when the
        store cannot be served safely."""
        store = cls(config, clock_ms, accept_offset_loss)
        try:
            store._load()
        except BaseException:
            store._release()
            raise
        return store

    def _release(self) -> None:
        """Unmap what was opened and drop the lock (a failed open moves nothing)."""
        commit_log = getattr(self, "commit_log", None)
        if commit_log is not None:
            commit_log.queue.close()
        for cq in self.queues.values():
            cq.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load(self) -> None:
        lock_path = os.path.join(self.root, "lock")
        try:
            os.makedirs(self.root, exist_ok=True)
            self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(
                f"store directory {self.root} (storePathRootDir): cannot create or lock "
                f"{exc.filename or lock_path}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise StoreError(f"{self.root} is in use by another process (lock held)") from exc
        abort_path = os.path.join(self.root, "abort")
        abnormal = os.path.exists(abort_path)
        self.checkpoint = StoreCheckpoint.read(os.path.join(self.root, "checkpoint"))
        self.commit_log = CommitLog.load(
            self.config.store_path_commit_log,
            self.config.mapped_file_size_commit_log,
            self.config.store_host,
        )
        self._load_consume_queues()
        self.dispatcher = Dispatcher(self.commit_log, self.consume_queue, self._tags_code)
        self._finish_truncation()
        redispatch: list[msgfmt.Record] = []
        self.recovery = self.commit_log.recover(
            abnormal,
            self.checkpoint.min_timestamp,
            redispatch.append if abnormal else None,
            check_crc=self.config.check_crc_on_recover,
            refetch_damage=self.config.broker_role is BrokerRole.SLAVE,
            root=self.root,
        )
        self.quarantine_reports = recovery.pending_reports(self.root)
        if abnormal:
            log.warning(
                "%s: recovered after a crash: scanned from %d, log ends at %d, dropped %d bytes",
                self.root,
                self.recovery.scanned_from,
                self.recovery.valid_end,
                self.recovery.dropped_bytes,
            )
        self._recover_consume_queues(redispatch)
        self.consumer_offsets = ConsumerOffsetManager.load(
            self._cfg("consumerOffset.json"),
            max_offset_of=self.get_max_offset_in_queue,
            accept_offset_loss=self.accept_offset_loss,
            restore_hint=offsets_restore_hint(self.config),
        )
        for group, topic, qid, offset, top in self.consumer_offsets.beyond_queues()[:20]:
            log.warning(
                "committed offset of %s on %s/%d is %d, above the queue's max offset %d "
                "(kept, never lowered at start; the audit reports it)",
                group, topic, qid, offset, top,
            )  # fmt: skip
        self.delay_offsets = DelayOffsetTable.load(self._cfg("delayOffset.json"))
        self.topic_config = TableConfig.load(self._cfg("topics.json"), "topicConfigTable")
        self.subscription_groups = TableConfig.load(
            self._cfg("subscriptionGroup.json"), "subscriptionGroupTable"
        )
        check_writable(self.config_dir, self.root)
        with open(abort_path, "wb") as fh:
            fh.flush()
            os.fsync(fh.fileno())

    def _finish_truncation(self) -> None:
        """A truncation a crash interrupted (its marker is still there): finish it first."""
        marker = os.path.join(self.root, TRUNCATING)
        try:
            with open(marker, encoding="ascii") as fh:
                text = fh.read().strip()
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"{marker}: unreadable truncation marker: {exc}") from exc
        if not text.isdigit():
            raise StoreError(f"{marker}: truncation marker holds {text!r}, not an offset")
        offset = int(text)
        log.warning("%s: finishing a truncation interrupted at %d", self.root, offset)
        self.commit_log.truncate_dirty(offset)
        os.unlink(marker)

    def _cfg(self, name: str) -> str:
        return os.path.join(self.config_dir, name)

    def _load_consume_queues(self) -> None:
        if not os.path.isdir(self.cq_root):
            return
        for topic in sorted(os.listdir(self.cq_root)):
            tdir = os.path.join(self.cq_root, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                if qid.lstrip("-").isdigit():
                    self.queues[(topic, int(qid))] = self._open_queue(topic, int(qid))

    def _open_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue.load(
            self.cq_root, topic, queue_id, self.config.mapped_file_size_consume_queue
        )

    def _recover_consume_queues(self, redispatch: list[msgfmt.Record]) -> None:
        end = self.commit_log.max_offset
        for cq in self.queues.values():
            cq.truncate_dirty(end)
        try:
            for rec in redispatch:
                self.dispatcher.dispatch_record(rec)
            start = max((cq.max_phy_offset for cq in self.queues.values()), default=0)
            self.dispatcher.dispatched_offset = max(start, self.commit_log.min_offset)
            self.dispatcher.dispatch_until(end)
        except StoreError as exc:
            log.warning("consume queues inconsistent with the commit log (%s); rebuilding", exc)
            rebuild_consume_queues(
                self.commit_log, self.cq_root, self.queues, self._open_queue, self._tags_code
            )
            self.dispatcher.dispatched_offset = end
        for key, cq in self.queues.items():
            self.topic_queue_table[key] = cq.max_offset_in_queue

    def rebuild_consume_queues(self) -> int:
        with self.put_lock:
            n = rebuild_consume_queues(
                self.commit_log, self.cq_root, self.queues, self._open_queue, self._tags_code
            )
            self.topic_queue_table = {k: cq.max_offset_in_queue for k, cq in self.queues.items()}
            self.dispatcher.dispatched_offset = self.commit_log.max_offset
            return n

    def start(self) -> None:
        """Start the flush services (threads)."""
        cfg = self.config
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._group_commit = GroupCommitService(
                self._flush_commit_log, self._complete_flush, cfg.sync_flush_timeout_ms
            )
            self._group_commit.start()
        else:
            self._flusher = FlushRealTimeService(
                self._flush_commit_log,
                cfg.flush_interval_commit_log_ms,
                cfg.flush_commit_log_least_pages,
                cfg.flush_commit_log_thorough_interval_ms,
            )
            self._flusher.start()
        self._cq_flusher = threading.Thread(target=self._cq_flush_loop, daemon=True)
        self._cq_flusher.start()
        self.running = True

    def shutdown(self) -> None:
        """Flush everything, persist configs and the checkpoint, release the store."""
        self.running = False
        self._stop.set()
        if self._group_commit is not None:
            self._group_commit.shutdown()
        if self._flusher is not None:
            self._flusher.shutdown()
        if self._cq_flusher is not None:
            self._cq_flusher.join(timeout=10)
        self.flush_all()
        persisted = True
        for table in (
            self.consumer_offsets,
            self.delay_offsets,
            self.topic_config,
            self.subscription_groups,
        ):
            try:
                table.persist()
            except OSError as exc:  # keep shutting down; abort stays: the stop was not clean
                persisted = False
                log.error("shutdown: persisting %s failed: %s", exc.filename, exc.strerror)
        self.commit_log.queue.close()
        for cq in self.queues.values():
            cq.close()
        try:
            if persisted:
                os.unlink(os.path.join(self.root, "abort"))
        except FileNotFoundError:
            pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def close_abruptly(self) -> None:
        """Release files without flushing or removing ``abort`` (tests simulating a crash)."""
        self._stop.set()
        if self._group_commit is not None:
            self._group_commit.shutdown()
        if self._flusher is not None:
            self._flusher._stop.set()
        self.commit_log.queue.close()
        for cq in self.queues.values():
            cq.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- flushing ------------------------------------------------------------------------------

    def _flush_commit_log(self, least_pages: int = 0) -> int:
        ts = self._last_store_ts
        flushed = self.commit_log.flush(least_pages)
        if flushed >= self.commit_log.max_offset and ts:
            self.checkpoint.physic_msg_timestamp = ts
        return flushed

    def _complete_flush(self, batch: list[tuple[_Waiter | _LoopBatch, bool]]) -> None:
        """Complete a batch of put waiters: thread futures directly, a loop's puts with one
        call into that loop per batch it handed over (not one wake-up per append)."""
        for waiter, ok in batch:
            if waiter.__class__ is _LoopBatch:
                try:
                    waiter.loop.call_soon_threadsafe(waiter.settle, ok)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    pass
                continue
            if not ok:
                waiter.result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
            if not waiter.future.done():
                try:
                    waiter.future.set_result(waiter.result)
                except Exception:  # completed by the other service thread meanwhile
                    pass

    def _cq_flush_loop(self) -> None:
        while not self._stop.wait(self.config.flush_interval_consume_queue_ms / 1000):
            try:
                self._flush_consume_queues()
            except Exception:
                log.exception("consume queue flush failed")

    def _flush_consume_queues(self) -> None:
        ts = self._last_store_ts
        for cq in list(self.queues.values()):
            cq.flush()
        if ts:
            self.checkpoint.logics_msg_timestamp = ts
        self.checkpoint.write(os.path.join(self.root, "checkpoint"))

    def flush_all(self) -> int:
        flushed = self._flush_commit_log(0)
        self._flush_consume_queues()
        return flushed

    flush_commit_log_all = flush_all

    @property
    def fsyncs(self) -> int:
        return self.commit_log.queue.flush_count

    # -- writing -------------------------------------------------------------------------------

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            cq = self.queues[key] = self._open_queue(topic, queue_id)
        return cq

    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        self._listeners.append(listener)

    def remove_dispatch_listener(self, listener: DispatchListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        for listener in self._listeners:
            try:
                listener(topic, queue_id, max_offset)
            except Exception:
                log.exception("dispatch listener failed")

    def put_message(self, msg: msgfmt.Message, *, tags_code: int | None = None) -> PutFuture:
        """Append ``msg``; the future completes after the flush (SYNC_FLUSH) or at once."""
        try:
            enc = msgfmt.encode_message(msg, self.config.store_host)
        except ValueError as exc:
            fut: Future = Future()
            status = (
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
                if "properties" in str(exc)
                else PutMessageStatus.MESSAGE_ILLEGAL
            )
            fut.set_result(PutMessageResult(status, remark=str(exc)))
            return fut
        if len(enc) > self.config.max_message_size_bytes:
            fut = Future()
            fut.set_result(
                PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="message too large")
            )
            return fut
        if tags_code is not None:
            enc.tags_code = tags_code
        return self.put_encoded(enc)

    async def put_message_async(
        self, msg: msgfmt.Message, *, tags_code: int | None = None
    ) -> PutMessageResult:
        """``put_message`` for asyncio callers: flush requests and completions go in batches."""
        try:
            enc = msgfmt.encode_message(msg, self.config.store_host)
        except ValueError:
            return self.put_message(msg).result()
        if len(enc.data) > self.config.max_message_size_bytes:
            return self.put_message(msg).result()
        if tags_code is not None:
            enc.tags_code = tags_code
        result = self._append(enc)
        group_commit = self._group_commit
        if group_commit is None or result.status is not _PUT_OK:
            return result
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._submit_from_loop(loop, result.wrote_offset + result.wrote_bytes, fut, result)
        return await fut

    def put_encoded(self, enc: msgfmt.EncodedMessage, loop=None) -> PutFuture:
        """Append; ``loop`` given: under SYNC_FLUSH the answer is an asyncio future of it."""
        result = self._append(enc)
        group_commit = self._group_commit
        if group_commit is None or result.status is not _PUT_OK:
            return _CompletedFuture(result)
        end = result.wrote_offset + result.wrote_bytes
        if loop is None:
            fut = Future()
            group_commit.submit(end, _Waiter(fut, result))
        else:
            fut = loop.create_future()
            self._submit_from_loop(loop, end, fut, result)
        return fut

    def _append(self, enc: msgfmt.EncodedMessage) -> PutMessageResult:
        """Append under the put lock and index; the result's status says whether it went in."""
        topic = enc.topic
        queue_id = enc.queue_id
        key = (topic, queue_id)
        with self.put_lock:
            if self.role is BrokerRole.SLAVE:
                return PutMessageResult(
                    PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="a slave takes no writes"
                )
            table = self.topic_queue_table
            qo = table.get(key, 0)
            ts = self.clock_ms()
            if ts < self._last_store_ts:
                ts = self._last_store_ts
            try:
                offset = self.commit_log.append_encoded(enc, qo, ts)
            except StoreError as exc:
                log.error("append failed: %s", exc)
                return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, remark=str(exc))
            size = len(enc.data)
            if topic and queue_id >= 0:
                cq = self.queues.get(key)
                if cq is None:
                    cq = self.consume_queue(topic, queue_id)
                cq.put(qo, offset, size, enc.tags_code)
            table[key] = qo + 1
            self._last_store_ts = ts
            self.dispatcher.dispatched_offset = offset + size
        result = PutMessageResult(
            _PUT_OK, offset, size, f"{self._msg_id_prefix()}{offset:016X}", qo, ts
        )
        if self._listeners:
            self._notify(topic, queue_id, qo + 1)
        return result

    def _msg_id_prefix(self) -> str:
        host, port = self.config.store_host
        return msgfmt.message_id_prefix(host, port)

    def _submit_from_loop(
        self, loop: asyncio.AbstractEventLoop, end: int, fut, result: PutMessageResult
    ) -> None:
        """Queue a flush request from an event loop; the loop hands over all it queued in one
        go at its next turn, so the flush thread is woken once per batch, not per append."""
        batch = self._loop_pending.get(loop)
        if batch is None:
            batch = self._loop_pending[loop] = _LoopBatch(loop)
            loop.call_soon(self._hand_over, loop)
        batch.futures.append(fut)
        batch.results.append(result)

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._loop_pending.pop(loop, None)
        if batch is None:
            return
        # appends are in offset order: the last one's end covers the whole batch
        last = batch.results[-1]
        group_commit = self._group_commit
        if group_commit is None:  # shut down meanwhile
            batch.settle(False)
        else:
            group_commit.submit(last.wrote_offset + last.wrote_bytes, batch)

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Slave side: append replicated bytes at exactly the log end and index what completed."""
        with self.put_lock:
            end = self.commit_log.append_raw(offset, data)
            touched = self.dispatcher.dispatch_until(end)
            for topic, qid, qo in touched:
                self.topic_queue_table[(topic, qid)] = qo
        for topic, qid, qo in touched:
            self._notify(topic, qid, qo)
        return end

    def truncate_dirty(self, offset: int) -> None:
        """Drop commit log and consume queue data at or above ``offset`` (failover rejoin).

        A ``truncating`` marker (the offset, written atomically) lives while the bytes are
        zeroed: a crash halfway leaves zeros followed by old records, which recovery would
        otherwise take for damage; with the marker it finishes the truncation instead."""
        marker = os.path.join(self.root, TRUNCATING)
        with self.put_lock:
            log.warning(
                "%s: truncating the commit log [%d, %d)", self.root, offset, self.max_phy_offset
            )
            atomic_write(marker, str(offset).encode())
            self.commit_log.truncate_dirty(offset)
            os.unlink(marker)
            for key, cq in self.queues.items():
                cq.truncate_dirty(offset)
                self.topic_queue_table[key] = cq.max_offset_in_queue
            self.dispatcher.dispatched_offset = min(self.dispatcher.dispatched_offset, offset)
