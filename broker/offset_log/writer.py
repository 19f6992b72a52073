"""A master appends consumer offset commits as records of ``RMQ_SYS_CONSUMER_OFFSETS``
(DESIGN.md 3b) instead of only changing its table.

Commits of one (group, topic) arriving within ``coalesce_ms`` (``offsetCommitCoalesceMs``,
default 20 ms) go into one record, each queue with the highest offset asked: a consumer commits
every queue it holds at once (RocketMQ's persistConsumerOffset every 5 s), so a rebalanced
group of 256 queues costs a few records, not 256. Forward-only as before: a commit at or below
the committed offset appends nothing; one above the queue's max offset is refused. The caller
is answered once the record is applied (see ``applier``): on a SYNC_MASTER after the in-sync
slaves hold it. An admin reset (a reset listener of the manager) appends a ``reset`` record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.clock import SYSTEM_CLOCK, Clock
from broker.store.consumer_offsets import OffsetOutOfRangeError
from broker.store.results import PutMessageStatus
from contracts.errors import StoreError
from contracts.offset_commits.builder import commit_message
from contracts.offset_commits.model import KIND_COMMIT, KIND_RESET, OffsetCommit

log = logging.getLogger(__name__)

DEFAULT_COALESCE_MS = 20


@dataclass
class _Batch:
    """The commits of one (group, topic) within ``coalesce_ms``. The commits wait on ``done``
    (an Event: a waiter cancelled leaves the others waiting, and costs less per waiter than
    ``asyncio.shield`` of one shared future); ``error`` is why the append failed."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    offsets: dict[int, int] = field(default_factory=dict)
    froms: set[str] = field(default_factory=set)
    error: BaseException | None = None


class OffsetCommitWriter:
    """``store`` (put_message_async, consumer_offsets, max_phy_offset), ``role`` (the node's
    BrokerRoleState: epoch, is the node a master), ``await_replication(result)`` (the node's
    replication wait), ``applied()`` (the applier's catch-up, called after each append)."""

    def __init__(
        self,
        store,
        role,
        await_replication: Callable,
        applied: Callable[[], int],
        *,
        coalesce_ms: float = DEFAULT_COALESCE_MS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.role = role
        self.await_replication = await_replication
        self.applied = applied
        self.coalesce_ms = coalesce_ms
        self.clock = clock
        self.pending: dict[tuple[str, str], _Batch] = {}
        self.records = 0
        self._tasks: set[asyncio.Task] = set()

    async def commit(self, group: str, topic: str, queue_id: int, offset: int, peer: str) -> None:
        """Record a client's commit; returns once applied. Raises OffsetOutOfRangeError (beyond
        the queue's max offset) or StoreError (the append failed)."""
        offsets = self.store.consumer_offsets
        if offsets.max_offset_of is not None and offset > offsets.max_offset_of(topic, queue_id):
            offsets.commit(group, topic, queue_id, offset)  # raises, counted, as without the log
        batch = self.pending.get((group, topic))
        if offset <= offsets.query(group, topic, queue_id) and (
            batch is None or queue_id not in batch.offsets
        ):
            return  # forward-only: nothing new to record
        if batch is None:
            batch = _Batch()
            self.pending[(group, topic)] = batch
            self._spawn(self._flush_later(group, topic, batch))
        batch.offsets[queue_id] = max(batch.offsets.get(queue_id, -1), offset)
        batch.froms.add(peer)
        await batch.done.wait()
        if batch.error is not None:
            raise batch.error

    def commit_soon(self, group: str, topic: str, queue_id: int, offset: int, peer: str) -> None:
        """A commit carried by a pull: recorded in the background, refusals logged."""
        self._spawn(self._quietly(self.commit(group, topic, queue_id, offset, peer)))

    def on_reset(self, group: str, topic: str, queue_id: int, before: int, after: int) -> None:
        """The manager's reset listener: a master records the rewind (``by`` admin)."""
        if self.role.role.is_master:
            now = self.clock.wall_ms()
            previous = {queue_id: max(before, 0)}
            values = {queue_id: after}
            c = OffsetCommit(
                KIND_RESET, group, topic, values, self.role.epoch, now, "admin", previous, "admin"
            )
            self._spawn(self._quietly(self._append(c)))

    async def _flush_later(self, group: str, topic: str, batch: _Batch) -> None:
        try:
            await self.clock.sleep_ms(self.coalesce_ms)
            del self.pending[(group, topic)]
            peers = ",".join(sorted(batch.froms))[:255]
            now = self.clock.wall_ms()
            c = OffsetCommit(
                KIND_COMMIT, group, topic, dict(batch.offsets), self.role.epoch, now, peers
            )
            await self._append(c)
        except asyncio.CancelledError:  # the node stops: the commits are refused, not lost
            batch.error = StoreError("offset commit not recorded: the offset log stopped")
            raise
        except BaseException as exc:
            batch.error = exc
            raise
        finally:
            batch.done.set()

    async def _append(self, c: OffsetCommit) -> None:
        result = await self.store.put_message_async(commit_message(c))
        if result.status is not PutMessageStatus.PUT_OK:
            raise StoreError(f"offset commit record not appended: {result.status.name}")
        self.records += 1
        status = await self.await_replication(result)
        if status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT:  # (no slave at all: not news)
            log.warning("offset record at %d: %s", result.wrote_offset, status.name)
        self.applied()

    @staticmethod
    async def _quietly(coro) -> None:
        try:
            await coro
        except (OffsetOutOfRangeError, StoreError) as exc:
            log.warning("offset commit not recorded: %s", exc)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
