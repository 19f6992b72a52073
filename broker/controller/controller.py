"""One controller (RocketMQ's ControllerManager + DLedger/JRaftController): requests are
decided one at a time by the leader against the replicated tables, their events appended to the
log (journal or Raft) and answered once committed and applied; non-leaders answer NOT_LEADER
(2007). Liveness is this controller's own (heartbeats). A housekeeping loop on the injected
clock drops silent brokers and, on the leader, elects for every broker set whose master is gone,
then tells the set's alive brokers (NOTIFY_BROKER_ROLE_CHANGED, 1008) when
``notifyBrokerRoleChanged``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Protocol

from broker.clock import SYSTEM_CLOCK, Clock
from broker.controller.config import ControllerConfig
from broker.controller.events import Event
from broker.controller.heartbeat import BrokerHeartbeatManager
from broker.controller.manager import ReplicasInfoManager, Result
from broker.controller.state_machine import ControllerStateMachine
from broker.loop_service import LoopService
from broker.remoting.codes import ResponseCode as RC
from contracts.errors import HaproofError

log = logging.getLogger(__name__)

# (broker address, header fields, body) -> sends NOTIFY_BROKER_ROLE_CHANGED one-way
Notifier = Callable[[str, dict, dict], Awaitable[None]]


class EventLog(Protocol):
    def is_leader(self) -> bool: ...

    def leader_addr(self) -> str | None:
        """The leader's remoting address, when known."""

    async def barrier(self) -> bool:
        """Returns once every event committed before this leader's term is applied; True when
        this call began this controller's term as leader (its first barrier in it)."""

    async def append(self, events: list[Event]) -> None:
        """Returns once the events are committed and applied to the state machine."""


class Controller:
    def __init__(
        self,
        config: ControllerConfig,
        event_log: EventLog,
        sm: ControllerStateMachine,
        *,
        clock: Clock = SYSTEM_CLOCK,
        notifier: Notifier | None = None,
        self_addr: str = "",
    ) -> None:
        self.config = config
        self.log = event_log
        self.sm = sm
        self.clock = clock
        self.notifier = notifier
        self.self_addr = self_addr
        self.heartbeats = BrokerHeartbeatManager(clock, config.brokerHeartbeatTimeoutMaxMs)
        self._serial = asyncio.Lock()
        self.housekeeping_tasks: set[asyncio.Task] = set()
        # broker channels whose close is watched (a closed channel: the broker is not alive)
        self.watched_channels: weakref.WeakSet = weakref.WeakSet()
        self.housekeeping = Housekeeping(self)

    @property
    def manager(self) -> ReplicasInfoManager:
        return ReplicasInfoManager(
            self.sm.tables, unclean_allowed=self.config.enableElectUncleanMaster
        )

    def not_leader(self) -> Result:
        leader = self.log.leader_addr()
        return Result(
            code=RC.CONTROLLER_NOT_LEADER,
            remark=f"The controller is not in leader state; leader: {leader or 'unknown'}",
            header={"controllerLeaderAddress": leader},
        )

    async def submit(self, decide: Callable[[ReplicasInfoManager], Result]) -> Result:
        """Decide on the leader, append the decision's events, answer once applied."""
        if not self.log.is_leader():
            return self.not_leader()
        async with self._serial:
            try:
                if await self.log.barrier():  # leading anew: leases it never saw may hold
                    self.heartbeats.on_leadership()
                if not self.log.is_leader():
                    return self.not_leader()
                with self.sm.lock:
                    result = decide(self.manager)
                if result.events:
                    await self.log.append(result.events)
            except HaproofError as exc:  # lost leadership, or the commit's outcome is unknown
                log.warning("controller: change not committed: %s", exc)
                if not self.log.is_leader():
                    return self.not_leader()
                return Result(code=RC.CONTROLLER_JRAFT_INTERNAL_ERROR, remark=str(exc))
        return result

    async def read(self, decide: Callable[[ReplicasInfoManager], Result]) -> Result:
        """Reads come from the leader's memory after its barrier (as DLedger's controller)."""
        return await self.submit(decide)

    async def elect(self, broker_name: str, broker_id: int, designate: bool) -> Result:
        result = await self.submit(
            lambda m: m.elect_master(
                broker_name, broker_id, designate, self.heartbeats, self.clock.wall_ms()
            )
        )
        if result.code == RC.SUCCESS and self.config.notifyBrokerRoleChanged:
            await self.notify_role_changed(result)
        return result

    async def notify_role_changed(self, result: Result) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED to every alive member of the group (one-way)."""
        group = (result.body or {}).get("brokerMemberGroup")
        if self.notifier is None or not group:
            return
        header = dict(result.header)
        body = {
            "syncStateSet": result.body["syncStateSet"],
            "syncStateSetEpoch": header.get("syncStateSetEpoch"),
        }
        for bid, addr in sorted(group["brokerAddrs"].items()):
            if self.heartbeats.is_alive(group["cluster"], group["brokerName"], int(bid)):
                try:
                    await self.notifier(addr, header, body)
                except Exception as exc:  # noqa: BLE001 - brokers also pull (1004) every few s
                    log.warning("notify %s of the new master failed: %s", addr, exc)

    async def housekeep(self) -> list[Result]:
        """Drop silent brokers; on the leader, elect where the master is gone."""
        for key in self.heartbeats.scan_not_active():
            log.warning("broker %s of %s (cluster %s) stopped heartbeating", key[2], key[1], key[0])
        if not self.log.is_leader():
            return []
        with self.sm.lock:
            names = self.manager.scan_need_reelect(self.heartbeats)
        results = []
        for name in names:
            result = await self.elect(name, -1, False)
            log.warning(
                "master of %s gone: election -> %s %s",
                name,
                result.code,
                result.header.get("masterBrokerId"),
            )
            results.append(result)
        return results

    def on_channel_close(self, channel: object) -> None:
        with self.sm.lock:
            masters = frozenset(
                (info.clusterName, name, info.masterBrokerId)
                for name, info in self.sm.tables.sync_states.items()
                if info.masterBrokerId is not None
            )
        if self.heartbeats.on_channel_close(channel, masters):
            self.housekeeping.wakeup()


class Housekeeping(LoopService):
    def __init__(self, controller: Controller) -> None:
        cfg = controller.config
        super().__init__(
            "controller-housekeeping",
            period_ms=min(cfg.scanNotActiveBrokerInterval, cfg.scanInactiveMasterInterval),
            clock=controller.clock,
        )
        self.controller = controller

    async def run_once(self) -> None:
        await self.controller.housekeep()
