"""The store façade (RocketMQ DefaultMessageStore): one object a broker node talks to.

Layout under ``storePathRootDir``: ``commitlog/``, ``consumequeue/{topic}/{queueId}/``,
``config/*.json``, ``checkpoint``, ``abort`` (present while running: its presence at start means
the last run crashed) and ``lock`` (one process per store).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from broker.clock import SYSTEM_CLOCK, Clock
from broker.store import delay, recovery, truncation
from broker.store.checkpoint import StoreCheckpoint
from broker.store.commit_log import CommitLog, RecoveryReport
from broker.store.consume_queue import ConsumeQueue
from broker.store.consumer_offsets import ConsumerOffsetManager
from broker.store.delay_offsets import DelayOffsetTable
from broker.store.dispatcher import Dispatcher
from broker.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from broker.store.puts import DispatchListener, PutFuture, StorePuts
from broker.store.queries import StoreQueries
from broker.store.queue_table import ConsumeQueueTable
from broker.store.results import GetMessageResult, PutMessageResult
from broker.store.role import BrokerRoleState
from broker.store.startup import (
    check_writable,
    lock_store_dir,
    offsets_replayable,
    offsets_restore_hint,
    warn_offsets_beyond_queues,
)
from broker.store.store_config import BrokerRole, FlushDiskType, StoreConfig
from broker.store.subscription_groups import SubscriptionGroupManager
from broker.store.topic_configs import TopicConfigManager
from contracts.record.builder import EncodedMessage
from contracts.record.model import Message, Record

log = logging.getLogger(__name__)

__all__ = ["DispatchListener", "MessageStore", "PutFuture", "time_ms"]  # re-exported types


time_ms = SYSTEM_CLOCK.wall_ms  # a bare store's wall clock (a node hands in its own)


class MessageStore:
    """The façade over the parts it owns: the commit log, the consume queues
    (:class:`ConsumeQueueTable`), the write side (:class:`StorePuts`), the read side
    (:class:`StoreQueries`), the flush services and the config tables; built by ``open``."""

    def __init__(
        self,
        config: StoreConfig,
        clock_ms: Callable[[], int],
        accept_offset_loss: bool = False,
        role_state: BrokerRoleState | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.config = config
        self.clock = clock  # what the flush threads wait on (the node's)
        # the node's one owner of its current role (a bare store: the configured one)
        self.role_state = role_state or BrokerRoleState.configured(config)
        self.accept_offset_loss = accept_offset_loss
        self.clock_ms = clock_ms
        self.root = config.store_path_root_dir
        self.cq_root = os.path.join(self.root, "consumequeue")
        self.config_dir = os.path.join(self.root, "config")
        self.commit_log: CommitLog
        self._opened_log: CommitLog | None = None  # set as soon as _load opened it (release)
        self.cq_table = ConsumeQueueTable(self.cq_root, config.mapped_file_size_consume_queue)
        self.checkpoint = StoreCheckpoint()
        self.recovery: RecoveryReport | None = None
        # quarantined ranges (repair, slave refetch) not yet reported as recovered events
        self.quarantine_reports: list[dict] = []
        # (offset, log end before) of a rejoin cut a crash interrupted and the open finished
        self.finished_cut: tuple[int, int | None] | None = None
        self.put_lock = threading.Lock()
        self._lock_fd: int | None = None
        self._flusher: FlushRealTimeService | None = None
        self._cq_flusher: FlushConsumeQueueService | None = None
        self._checkpoint_lock = threading.Lock()  # the flush thread and flush_all both write it
        self.running = False
        self.dispatcher: Dispatcher
        self.puts: StorePuts  # built once the commit log is open (_load)
        self.queries: StoreQueries
        # schedule-topic entries carry their delivery time, derived from DELAY + store time
        self._tags_code = delay.record_tags_code(
            delay.parse_delay_levels(config.message_delay_level)
        )

    @property
    def role(self) -> BrokerRole:
        """The node's current role (read from its role state; changes only at failover)."""
        return self.role_state.role

    @property
    def queues(self) -> dict[tuple[str, int], ConsumeQueue]:
        return self.cq_table.queues

    @property
    def topic_queue_table(self) -> dict[tuple[str, int], int]:
        return self.cq_table.next_offsets

    @property
    def _group_commit(self) -> GroupCommitService | None:
        return self.puts.group_commit

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        config: StoreConfig,
        *,
        clock_ms: Callable[[], int] = time_ms,
        accept_offset_loss: bool = False,
        role_state: BrokerRoleState | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> MessageStore:
        """Lock the store directory, load every file and recover (normal or after a crash).
        Raises StoreError (one line naming what and where) and releases the directory when the
        store cannot be served safely."""
        store = cls(config, clock_ms, accept_offset_loss, role_state, clock)
        try:
            store._load()
        except BaseException:
            store._release()
            raise
        return store

    def _release(self) -> None:
        """Unmap what was opened and drop the lock (a failed open moves nothing)."""
        if self._opened_log is not None:
            self._opened_log.queue.close()
        self.cq_table.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load(self) -> None:
        self._lock_fd = lock_store_dir(self.root)
        abort_path = os.path.join(self.root, "abort")
        abnormal = os.path.exists(abort_path)
        self.checkpoint = StoreCheckpoint.read(os.path.join(self.root, "checkpoint"))
        self.commit_log = CommitLog.load(
            self.config.store_path_commit_log,
            self.config.mapped_file_size_commit_log,
            self.config.store_host,
        )
        self._opened_log = self.commit_log
        self.cq_table.load()
        self.dispatcher = Dispatcher(self.commit_log, self.cq_table.get_or_open, self._tags_code)
        self._build_parts()
        # a rejoin cut a crash interrupted (its marker is still there): finished first
        self.finished_cut = truncation.finish(self)
        redispatch: list[Record] = []
        self.recovery = self.commit_log.recover(
            abnormal,
            self.checkpoint.min_timestamp,
            redispatch.append if abnormal else None,
            check_crc=self.config.check_crc_on_recover,
            refetch_damage=self.role is BrokerRole.SLAVE,
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
        self.cq_table.recover(self.commit_log, self.dispatcher, redispatch, self._tags_code)
        self.consumer_offsets = ConsumerOffsetManager.load(
            self._cfg("consumerOffset.json"),
            max_offset_of=self.get_max_offset_in_queue,
            accept_offset_loss=self.accept_offset_loss,
            restore_hint=offsets_restore_hint(self.config),
            holds_messages=self.commit_log.max_offset > self.commit_log.min_offset
            and not offsets_replayable(self.config, self.queries),
        )
        warn_offsets_beyond_queues(self.consumer_offsets)
        self.delay_offsets = DelayOffsetTable.load(self._cfg("delayOffset.json"))
        self.topic_config = TopicConfigManager.load(self._cfg("topics.json"))
        self.subscription_groups = SubscriptionGroupManager.load(
            self._cfg("subscriptionGroup.json")
        )
        check_writable(self.config_dir, self.root)
        if self.consumer_offsets.fresh:  # a new store: from now on a missing file means a loss
            self.consumer_offsets.persist()
        with open(abort_path, "wb") as fh:
            fh.flush()
            os.fsync(fh.fileno())

    def _cfg(self, name: str) -> str:
        return os.path.join(self.config_dir, name)

    def _build_parts(self) -> None:
        self.puts = StorePuts(
            config=self.config,
            clock_ms=self.clock_ms,
            role_state=self.role_state,
            commit_log=self.commit_log,
            dispatcher=self.dispatcher,
            queues=self.cq_table,
            put_lock=self.put_lock,
        )
        self.queries = StoreQueries(self.commit_log, self.queues, self.dispatcher, self.put_lock)
        self.queries.on_damage = self.cq_table.damage_handler(self)

    def rebuild_consume_queues(self) -> int:
        with self.put_lock:
            n = self.cq_table.rebuild(self.commit_log, self._tags_code)
            self.dispatcher.dispatched_offset = self.commit_log.max_offset
            return n

    def start(self) -> None:
        """Start the flush services (threads)."""
        cfg, flush, clock = self.config, self._flush_commit_log, self.clock
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            done, timeout_ms = self.puts.complete_flush, cfg.sync_flush_timeout_ms
            self.puts.group_commit = GroupCommitService(flush, done, timeout_ms, clock)
            self.puts.group_commit.start()
        else:
            self._flusher = FlushRealTimeService(
                flush,
                cfg.flush_interval_commit_log_ms,
                cfg.flush_commit_log_least_pages,
                cfg.flush_commit_log_thorough_interval_ms,
                clock=clock,
            )
            self._flusher.start()
        interval_ms = cfg.flush_interval_consume_queue_ms
        self._cq_flusher = FlushConsumeQueueService(self._flush_consume_queues, interval_ms, clock)
        self._cq_flusher.start()
        self.running = True

    def shutdown(self) -> None:
        """Flush everything, persist configs and the checkpoint, release the store."""
        self.running = False
        if self._group_commit is not None:
            self._group_commit.shutdown()
        if self._flusher is not None:
            self._flusher.shutdown()
        if self._cq_flusher is not None:
            self._cq_flusher.stop()
        self.flush_all()
        persisted = True
        tables = self.consumer_offsets, self.delay_offsets, self.topic_config
        for table in (*tables, self.subscription_groups):
            try:
                table.persist()
            except OSError as exc:  # keep shutting down; abort stays: the stop was not clean
                persisted = False
                log.error("shutdown: persisting %s failed: %s", exc.filename, exc.strerror)
        self.commit_log.queue.close()
        self.cq_table.close()
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
        if self._cq_flusher is not None:
            self._cq_flusher.stop(join=False)
        if self._group_commit is not None:
            self._group_commit.shutdown()
        if self._flusher is not None:
            self._flusher._stop.set()
        self.commit_log.queue.close()
        self.cq_table.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- flushing ------------------------------------------------------------------------------

    def _flush_commit_log(self, least_pages: int = 0) -> int:
        ts = self.puts.last_store_ts
        flushed = self.commit_log.flush(least_pages)
        if flushed >= self.commit_log.max_offset and ts:
            self.checkpoint.physic_msg_timestamp = ts
        return flushed

    def _flush_consume_queues(self) -> None:
        ts = self.puts.last_store_ts
        for cq in list(self.queues.values()):
            cq.flush()
        with self._checkpoint_lock:  # one writer of checkpoint.tmp at a time
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

    # -- writing (StorePuts) -------------------------------------------------------------------

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return self.cq_table.get_or_open(topic, queue_id)

    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        self.puts.listeners.append(listener)

    def remove_dispatch_listener(self, listener: DispatchListener) -> None:
        if listener in self.puts.listeners:
            self.puts.listeners.remove(listener)

    def put_message(self, msg: Message, *, tags_code: int | None = None) -> PutFuture:
        return self.puts.put_message(msg, tags_code=tags_code)

    def put_message_async(
        self, msg: Message, *, tags_code: int | None = None
    ) -> Coroutine[Any, Any, PutMessageResult]:
        return self.puts.put_message_async(msg, tags_code=tags_code)

    def put_encoded(self, enc: EncodedMessage, loop=None) -> PutFuture:
        return self.puts.put_encoded(enc, loop)

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        return self.puts.append_raw(offset, data)

    # -- reading (StoreQueries) ------------------------------------------------------------------

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.flushed_offset

    @property
    def dispatched_offset(self) -> int:
        """Commit log offset up to which every complete record is in its consume queue."""
        return self.dispatcher.dispatched_offset

    def is_dispatched(self, phy_offset: int) -> bool:
        return self.queries.is_dispatched(phy_offset)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queries.get_max_offset_in_queue(topic, queue_id)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queries.get_min_offset_in_queue(topic, queue_id)

    def queue_max_offsets(self) -> dict[str, dict[int, int]]:
        return self.queries.queue_max_offsets()

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        return self.commit_log.read(offset, max_bytes)

    def look_message_by_offset(self, phy_offset: int) -> Record:
        return self.commit_log.lookup(phy_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.queries.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms)

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        tag_codes=None,
        max_bytes: int = 256 * 1024,
    ) -> GetMessageResult:
        return self.queries.get_message(topic, queue_id, offset, max_msgs, tag_codes, max_bytes)

    def truncate_dirty(self, offset: int, on_step: truncation.OnStep | None = None) -> None:
        """Drop commit log and consume queue data at or above ``offset`` (failover rejoin),
        durably, behind a marker a crash leaves for the next open to finish
        (``broker/store/truncation.py``; ``on_step``: the fault hook between its steps)."""
        truncation.cut(self, offset, on_step)
