"""A master appends consumer offset commits as records of ``RMQ_SYS_CONSUMER_OFFSETS``
(DESIGN.md 3b) instead of only changing its table.

Commits of one (group, topic) arriving within ``coalesce_ms`` (``offsetCommitCoalesceMs``,
default 20 ms) go into one record, each queue with the highest offset asked: a consumer commits
every queue it holds at once (RocketMQ's persistConsumerOffset every 5 s), so a rebalanced
group of 256 queues costs a few records, not 256. Forward-only as before: a commit at or below
the committed offset appends nothing; one above the queue's max offset is refused. An admin
reset (a reset listener of the manager) appends a ``reset`` record.

Read-your-writes: the caller is answered once the record is applied (``applier``), so the next
QUERY_CONSUMER_OFFSET shows it. A master applies a record once every in-sync slave holds it
(the confirmOffset), which may be after the replication wait is over (a SYNC_MASTER's ack needs
one slave, the confirmOffset all in-sync ones). Both waits together take at most
``timeout_ms`` (``syncFlushTimeout``) from the append. Past it the commit is still answered
SUCCESS, as after FLUSH_SLAVE_TIMEOUT: the record is in the log (and, unless the replication
wait timed out, on the slaves the ack needs), it becomes visible as the slaves catch up, and a
failure answered now could not be taken back then. Such an answer is logged and counted
(``visibility_lagged``, runtime info ``offsetLogVisibilityLagged``); so is one of a master
demoted while the commit waited (as a slave it applies its log, confirmed or not).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from broker.clock import SYSTEM_CLOCK, Clock
from broker.store.consumer_offsets import OffsetOutOfRangeError
from broker.store.results import PutMessageResult, PutMessageStatus
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
    BrokerRoleState: epoch, is the node a master), ``await_replication(result, timeout_ms)``
    (the node's replication wait), ``wait_applied(queue_offset, timeout_ms)`` (the applier's:
    True once the record is applied), ``timeout_ms`` (syncFlushTimeout: both waits together)."""

    def __init__(
        self,
        store,
        role,
        await_replication: Callable[[PutMessageResult, float], Awaitable[PutMessageStatus]],
        wait_applied: Callable[[int, float], Awaitable[bool]],
        *,
        timeout_ms: float,
        coalesce_ms: float = DEFAULT_COALESCE_MS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.role = role
        self.await_replication = await_replication
        self.wait_applied = wait_applied
        self.timeout_ms = timeout_ms
        self.coalesce_ms = coalesce_ms
        self.clock = clock
        self.pending: dict[tuple[str, str], _Batch] = {}
        self.records = 0
        self.visibility_lagged = 0  # answered before the record was applied (timeout_ms)
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
        deadline_ms = self.clock.monotonic_ms() + self.timeout_ms
        status = await self.await_replication(result, self.timeout_ms)
        if status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT:  # (no slave at all: not news)
            log.warning("offset record at %d: %s", result.wrote_offset, status.name)
        left_ms = deadline_ms - self.clock.monotonic_ms()
        if not await self.wait_applied(result.queue_offset, left_ms):
            self.visibility_lagged += 1
            log.warning(
                "offset record at %d not applied within syncFlushTimeout %d ms (its in-sync "
                "slaves do not all hold it yet): answered before QUERY_CONSUMER_OFFSET shows it",
                result.wrote_offset,
                self.timeout_ms,
            )

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
