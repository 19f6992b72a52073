"""Write side of the store, a part its façade owns (:class:`StorePuts`): puts, their futures and the group commit hand-over
(RocketMQ DefaultMessageStore.putMessage / CommitLog.asyncPutMessage).

Under SYNC_FLUSH a put's future completes when group commit has flushed past it; a thread's
put waits on a :class:`concurrent.futures.Future`, an event loop's puts of one turn share one
group commit waiter (:class:`LoopBatch`) answered with one call back into the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from broker.store.results import PutMessageResult, PutMessageStatus
from broker.store.role import BrokerRoleState
from broker.store.store_config import BrokerRole, StoreConfig
from contracts.errors import DiskFullError, StoreError
from contracts.record.builder import EncodedMessage, encode_message
from contracts.record.ids import message_id_prefix
from contracts.record.model import Message

if TYPE_CHECKING:
    from broker.store.commit_log import CommitLog
    from broker.store.dispatcher import Dispatcher
    from broker.store.flush import GroupCommitService
    from broker.store.queue_table import ConsumeQueueTable

log = logging.getLogger(__name__)

PutFuture = Future  # Future[PutMessageResult]
DispatchListener = Callable[[str, int, int], None]  # (topic, queue_id, new max queue offset)

_PUT_OK = PutMessageStatus.PUT_OK


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


class LoopBatch:
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


class StorePuts:
    """The store's write side, a part the façade owns (RocketMQ CommitLog.asyncPutMessage and
    the put futures): appends under the put lock, indexes them in their consume queues, tells
    the dispatch listeners and completes futures after group commit. Built by the façade once
    its commit log is open; the consume queues, the queue offset table and the put lock are
    the façade's, handed in (the same objects)."""

    def __init__(
        self,
        *,
        config: StoreConfig,
        clock_ms: Callable[[], int],
        role_state: BrokerRoleState,
        commit_log: CommitLog,
        dispatcher: Dispatcher,
        queues: ConsumeQueueTable,
        put_lock: threading.Lock,
    ) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.role_state = role_state
        self.commit_log = commit_log
        self.dispatcher = dispatcher
        self.cq_table = queues
        # the table's dicts (the same objects for the store's life: rebuilt in place)
        self._queues = queues.queues
        self._next_offsets = queues.next_offsets
        self.put_lock = put_lock
        # group commit (SYNC_FLUSH): set by the façade's start, None before and under ASYNC_FLUSH
        self.group_commit: GroupCommitService | None = None
        self.listeners: list[DispatchListener] = []
        self.last_store_ts = 0  # the newest store timestamp (the flush's checkpoint reads it)
        # flush requests queued by each event loop, handed to group commit once per loop turn
        self._loop_pending: dict[asyncio.AbstractEventLoop, LoopBatch] = {}

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Tell every dispatch listener a queue grew; one that fails is logged."""
        for listener in self.listeners:
            try:
                listener(topic, queue_id, max_offset)
            except Exception:
                log.exception("dispatch listener failed")

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Slave side: append replicated bytes at exactly the log end and index what completed."""
        with self.put_lock:
            end = self.commit_log.append_raw(offset, data)
            touched = self.dispatcher.dispatch_until(end)
            for topic, qid, qo in touched:
                self._next_offsets[(topic, qid)] = qo
        for topic, qid, qo in touched:
            self.notify(topic, qid, qo)
        return end

    def put_message(self, msg: Message, *, tags_code: int | None = None) -> PutFuture:
        """Append ``msg``; the future completes after the flush (SYNC_FLUSH) or at once."""
        try:
            enc = encode_message(msg, self.config.store_host, self.config.enabled_append_prop_crc)
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
        self, msg: Message, *, tags_code: int | None = None
    ) -> PutMessageResult:
        """``put_message`` for asyncio callers: flush requests and completions go in batches."""
        try:
            enc = encode_message(msg, self.config.store_host, self.config.enabled_append_prop_crc)
        except ValueError:
            return self.put_message(msg).result()
        if len(enc.data) > self.config.max_message_size_bytes:
            return self.put_message(msg).result()
        if tags_code is not None:
            enc.tags_code = tags_code
        result = self._append(enc)
        group_commit = self.group_commit
        if group_commit is None or result.status is not _PUT_OK:
            return result
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._submit_from_loop(loop, result.wrote_offset + result.wrote_bytes, fut, result)
        return await fut

    def put_encoded(self, enc: EncodedMessage, loop=None) -> PutFuture:
        """Append; ``loop`` given: under SYNC_FLUSH the answer is an asyncio future of it."""
        result = self._append(enc)
        group_commit = self.group_commit
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

    def _append(self, enc: EncodedMessage) -> PutMessageResult:
        """Append under the put lock and index; the result's status says whether it went in."""
        topic = enc.topic
        queue_id = enc.queue_id
        key = (topic, queue_id)
        with self.put_lock:
            if self.role_state.role is BrokerRole.SLAVE:
                return PutMessageResult(
                    PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="a slave takes no writes"
                )
            table = self._next_offsets
            qo = table.get(key, 0)
            ts = self.clock_ms()
            if ts < self.last_store_ts:
                ts = self.last_store_ts
            cq = None
            try:
                if topic and queue_id >= 0:
                    cq = self._queues.get(key)
                    if cq is None:
                        cq = self.cq_table.get_or_open(topic, queue_id)
                    cq.reserve(qo)  # the index has room before the log takes the record
                offset = self.commit_log.append_encoded(enc, qo, ts)
            except DiskFullError as exc:
                return self._disk_full(exc)
            except StoreError as exc:
                log.error("append failed: %s", exc)
                return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, remark=str(exc))
            if self._disk_full_since is not None:
                self._disk_space_back()
            size = len(enc.data)
            if cq is not None:
                cq.put(qo, offset, size, enc.tags_code)
            table[key] = qo + 1
            self.last_store_ts = ts
            self.dispatcher.dispatched_offset = offset + size
        result = PutMessageResult(
            _PUT_OK, offset, size, f"{self._msg_id_prefix()}{offset:016X}", qo, ts
        )
        if self.listeners:
            self.notify(topic, queue_id, qo + 1)
        return result

    _disk_full_since: int | None = None  # store clock ms of the first refusal; None: writable

    def _disk_full(self, exc: DiskFullError) -> PutMessageResult:
        """A full disk refuses sends (RocketMQ: SERVICE_NOT_AVAILABLE, "the broker's disk is
        full"); reads and replication go on, and the next put that finds room resumes."""
        if self._disk_full_since is None:
            self._disk_full_since = self.clock_ms()
            log.error(
                "disk full: refusing sends until space returns (reads and replication go on): %s",
                exc,
            )
        return PutMessageResult(
            PutMessageStatus.SERVICE_NOT_AVAILABLE,
            remark=f"service not available now: the broker's disk is full ({exc})",
        )

    def _disk_space_back(self) -> None:
        refused_s = (self.clock_ms() - (self._disk_full_since or 0)) / 1000
        self._disk_full_since = None
        log.warning("disk space is back: taking sends again (refused for %.1f s)", refused_s)

    def _msg_id_prefix(self) -> str:
        host, port = self.config.store_host
        return message_id_prefix(host, port)

    def _submit_from_loop(
        self, loop: asyncio.AbstractEventLoop, end: int, fut, result: PutMessageResult
    ) -> None:
        """Queue a flush request from an event loop; the loop hands over all it queued in one
        go at its next turn, so the flush thread is woken once per batch, not per append."""
        batch = self._loop_pending.get(loop)
        if batch is None:
            batch = self._loop_pending[loop] = LoopBatch(loop)
            loop.call_soon(self._hand_over, loop)
        batch.futures.append(fut)
        batch.results.append(result)

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._loop_pending.pop(loop, None)
        if batch is None:
            return
        # appends are in offset order: the last one's end covers the whole batch
        last = batch.results[-1]
        group_commit = self.group_commit
        if group_commit is None:  # shut down meanwhile
            batch.settle(False)
        else:
            group_commit.submit(last.wrote_offset + last.wrote_bytes, batch)

    def complete_flush(self, batch: list[tuple[_Waiter | LoopBatch, bool]]) -> None:
        """Complete a batch of put waiters: thread futures directly, a loop's puts with one
        call into that loop per batch it handed over (not one wake-up per append)."""
        for waiter, ok in batch:
            if waiter.__class__ is LoopBatch:
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
