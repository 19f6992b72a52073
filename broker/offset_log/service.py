"""The node service of ``offsetCommitThroughLog``: builds the applier and the writer over the
node's store, role and replication, applies records as they are dispatched (a slave) or
acknowledged (a master), and records admin resets."""

from __future__ import annotations

import asyncio

from broker.clock import SYSTEM_CLOCK, Clock
from broker.loop_service import LoopService
from broker.offset_log.applier import OffsetLogApplier
from broker.offset_log.writer import OffsetCommitWriter
from contracts.offset_commits.model import OFFSETS_QUEUE_ID, OFFSETS_TOPIC

#: a master re-checks what its slaves acknowledged this often, besides at once when HAService
#: says the confirmOffset may have moved (``ConfirmWatch``) and a record is dispatched
CATCH_UP_PERIOD_MS = 20


class _CatchUp(LoopService):
    def __init__(self, applier: OffsetLogApplier, clock: Clock) -> None:
        period = CATCH_UP_PERIOD_MS
        super().__init__("offset-log", period_ms=period, clock=clock, run_first_round_at_once=True)
        self.applier = applier

    async def run_once(self) -> None:
        self.applier.catch_up()


class OffsetLogService:
    """``store``, ``role`` (BrokerRoleState), ``replication`` (RoleServices: ``ha``,
    ``await_replication``), ``config`` (syncFlushTimeout, offsetCommitCoalesceMs),
    ``confirm_watch`` (broker/ha/confirm_watch.py: wakes the catch-up as slaves acknowledge)."""

    def __init__(
        self, store, role, replication, config, confirm_watch, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.store = store
        self.role = role
        self.replication = replication
        self.confirm_watch = confirm_watch  # HAService tells it as the confirmOffset may move
        self.applier = OffsetLogApplier(store, self.visible_end, clock)
        self.writer = OffsetCommitWriter(
            store,
            role,
            replication.await_replication,
            self.applier.wait_applied,
            timeout_ms=config.sync_flush_timeout_ms,
            coalesce_ms=config.offset_commit_coalesce_ms,
            clock=clock,
        )
        self.loop_service = _CatchUp(self.applier, clock)
        self._loop: asyncio.AbstractEventLoop | None = None
        # the offset records this node's log held at start (its queue's end): it may have
        # answered any of them before it stopped, so it answers no query until it applied them
        self.owed_at_start = 0

    def visible_end(self) -> int | None:
        """Where a master may apply up to (its in-sync slaves' confirm offset); None on a
        slave (everything its log holds)."""
        if not self.role.role.is_master:
            return None
        ha = self.replication.ha
        return self.store.max_phy_offset if ha is None else ha.status()["confirmOffset"]

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic == OFFSETS_TOPIC and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self.loop_service.wakeup)
            except RuntimeError:  # loop closed during shutdown
                pass

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.owed_at_start = self.store.queries.logged_max_offset_in_queue(
            OFFSETS_TOPIC, OFFSETS_QUEUE_ID
        )
        self.applier.catch_up()  # what the log holds beyond the checkpoint file
        self.store.add_dispatch_listener(self._on_dispatch)
        self.confirm_watch.subscribe(self.loop_service.wakeup)  # on the loop's own thread
        self.store.consumer_offsets.reset_listeners.append(self.writer.on_reset)
        self.loop_service.start()

    async def stop(self) -> None:
        self.store.remove_dispatch_listener(self._on_dispatch)
        self.confirm_watch.unsubscribe(self.loop_service.wakeup)
        if self.writer.on_reset in self.store.consumer_offsets.reset_listeners:
            self.store.consumer_offsets.reset_listeners.remove(self.writer.on_reset)
        await self.loop_service.stop()
        await self.writer.stop()

    def handlers(self) -> dict:
        return {}  # answers no request of its own: the processors call it

    def master_writer(self) -> OffsetCommitWriter | None:
        """The commit writer while this node is a master (a slave keeps RocketMQ's table
        commit)."""
        return self.writer if self.role.role.is_master else None

    def catch_up(self) -> None:
        """Apply what the log holds (and a master's slaves acknowledged) before answering a
        query, so a just-promoted slave never answers from a table behind its log."""
        self.applier.catch_up()

    def not_known(self) -> str | None:
        """Why this node's committed offsets are not known now, or None: the offset records its
        log held at start are not all applied yet. It may have answered any of them before it
        stopped, but a restarted node applies only what a master confirms (its read gate starts
        closed at 0 in controller mode) and a master only what its in-sync slaves hold, so until
        then its table may be below an answer it gave (sim seed 7100027, a slave: 0 where a
        master had answered 43; ``haproof chaos``, the killed master elected again: 0 where it
        had answered 5 before the kill). Records a rejoin cut took were never confirmed: they
        are owed no more."""
        if self.owed_at_start <= self.applier.next_queue_offset:
            return None
        held = self.store.queries.logged_max_offset_in_queue(OFFSETS_TOPIC, OFFSETS_QUEUE_ID)
        behind = min(self.owed_at_start, held) - self.applier.next_queue_offset
        if behind <= 0:
            self.owed_at_start = 0  # applied (or cut): known from now on
            return None
        waits_for = "its in-sync slaves" if self.role.role.is_master else "a master"
        return (
            f"{behind} offset record(s) this node held at start not applied yet (waiting for "
            f"{waits_for} to confirm them); ask again shortly"
        )

    def runtime_info(self) -> dict[str, object]:
        return {
            "offsetLogRecords": self.writer.records,
            "offsetLogVisibilityLagged": self.writer.visibility_lagged,
            "offsetLogApplied": self.applier.applied,
            "offsetLogOffset": self.applier.log_offset,
        }
