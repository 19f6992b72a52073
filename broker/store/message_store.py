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

from broker.config import BrokerConfig, BrokerRole, FlushDiskType, parse_delay_levels
from broker.ha.role import BrokerRoleState
from broker.store import delay, recovery
from broker.store.checkpoint import StoreCheckpoint, atomic_write
from broker.store.commit_log import CommitLog, RecoveryReport
from broker.store.config_store import DelayOffsetTable, TableConfig
from broker.store.consume_queue import ConsumeQueue
from broker.store.consumer_offsets import ConsumerOffsetManager
from broker.store.dispatcher import Dispatcher, rebuild_consume_queues
from broker.store.flush import FlushRealTimeService, GroupCommitService
from broker.store.puts import DispatchListener, LoopBatch, PutFuture, PutMixin
from broker.store.queries import QueryMixin
from broker.store.startup import check_writable, offsets_restore_hint
from contracts.errors import StoreError
from contracts.record.model import Record

log = logging.getLogger(__name__)

TRUNCATING = "truncating"  # marker file: a failover truncation in progress (its offset)
__all__ = ["DispatchListener", "MessageStore", "PutFuture", "time_ms"]  # re-exported types


def time_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore(PutMixin, QueryMixin):
    def __init__(
        self,
        config: BrokerConfig,
        clock_ms: Callable[[], int],
        accept_offset_loss: bool = False,
        role_state: BrokerRoleState | None = None,
    ):
        self.config = config
        # the node's one owner of its current role (a bare store: the configured one)
        self.role_state = role_state or BrokerRoleState.configured(config)
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
        self._loop_pending: dict[asyncio.AbstractEventLoop, LoopBatch] = {}
        self._last_store_ts = 0
        self._lock_fd: int | None = None
        self._group_commit: GroupCommitService | None = None
        self._flusher: FlushRealTimeService | None = None
        self._cq_flusher: threading.Thread | None = None
        self._stop = threading.Event()
        self.running = False
        self.dispatcher: Dispatcher
        # schedule-topic entries carry their delivery time, derived from DELAY + store time
        self._tags_code = delay.record_tags_code(parse_delay_levels(config.message_delay_level))

    @property
    def role(self) -> BrokerRole:
        """The node's current role (read from its role state; changes only at failover)."""
        return self.role_state.role

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        config: BrokerConfig,
        *,
        clock_ms: Callable[[], int] = time_ms,
        accept_offset_loss: bool = False,
        role_state: BrokerRoleState | None = None,
    ) -> MessageStore:
        """Lock the store directory, load every file and recover (normal or after a crash).
        Raises StoreError (one line naming what and where) and releases the directory when the
        store cannot be served safely."""
        store = cls(config, clock_ms, accept_offset_loss, role_state)
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
        self._recover_consume_queues(redispatch)
        self.consumer_offsets = ConsumerOffsetManager.load(
            self._cfg("consumerOffset.json"),
            max_offset_of=self.get_max_offset_in_queue,
            accept_offset_loss=self.accept_offset_loss,
            restore_hint=offsets_restore_hint(self.config),
            holds_messages=self.commit_log.max_offset > self.commit_log.min_offset,
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
        if self.consumer_offsets.fresh:  # a new store: from now on a missing file means a loss
            self.consumer_offsets.persist()
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

    def _recover_consume_queues(self, redispatch: list[Record]) -> None:
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
