"""The controller of a simulated group: the real ``Controller`` (decisions of
``broker/controller/manager.py``, elections of ``election.py``, heartbeat liveness, the
housekeeping loop that elects when a master goes silent, NOTIFY_BROKER_ROLE_CHANGED) with its
``ControllerProcessor`` on a remoting server of the simulated network, its events in the real
``Journal`` (the standalone controller's log, in the run's temp dir), on virtual time.

The controller crashes and restarts (``crash``, ``restart``): its tasks die, its connections
reset (or go silent on a power loss), its heartbeat table is gone, and a new ``Controller``
replays the journal, as a restarted process does. A journal record is written and fsynced
before it is applied and answered, so a crash keeps every record an answer came from; a power
loss inside the write of a record never answered leaves a torn tail (the restart cuts it off).
The world checks what a restart must keep: an epoch handed out before the crash is never handed
out again (``epoch-reused``).

The brokers reach it like any controller (``enableControllerMode=true``,
``controllerAddr``): their ``ControllerClient`` registers, heartbeats, pulls the replica info,
asks for elections and keeps the master lease; their master proposes its SyncStateSet. The world
reads the tables (who is master under which epoch, the SyncStateSet) and the elections as they
are applied (``elections``: (virtual time, epoch, broker id)).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import struct
from typing import TYPE_CHECKING

from broker.clock import SYSTEM_CLOCK
from broker.controller.config import ControllerConfig
from broker.controller.controller import Controller
from broker.controller.journal import Journal
from broker.controller.processor import ControllerProcessor
from broker.controller.state_machine import ControllerStateMachine
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from broker.remoting.server import RemotingServer
from tools.sim.invariants import Violation
from tools.sim.node import CONTROLLER_TIMEOUT_MS
from tools.sim.vloop import NODE

if TYPE_CHECKING:
    from tools.sim.world import World

CTL = "ctl"
CTL_IP = "127.0.1.9"
CTL_PORT = 9878
SCAN_MS = 1000  # scanNotActiveBrokerInterval / scanInactiveMasterInterval
SNAPSHOT_EVERY = 16  # events between journal snapshots (small: restarts replay both)


class SimController:
    def __init__(self, world: World, broker_name: str, root: str) -> None:
        self.world, self.broker_name = world, broker_name
        self.dir = os.path.join(root, CTL)
        self.config = ControllerConfig(
            listenHost=CTL_IP,
            listenPort=CTL_PORT,
            scanNotActiveBrokerInterval=SCAN_MS,
            scanInactiveMasterInterval=SCAN_MS,
            controllerStorePath=self.dir,
            snapshotEveryEvents=SNAPSHOT_EVERY,
            # the brokers' timeout exactly: the tightest grace a restarted controller may give
            brokerHeartbeatTimeoutMaxMs=CONTROLLER_TIMEOUT_MS,
        )
        self.client = RemotingClient()
        self.server: RemotingServer | None = None
        self.elections: list[tuple[float, int, int]] = []  # (time, epoch, broker id)
        self.handed: dict[int, int] = {}  # epoch -> the broker id it was handed to
        self.up = False
        self.down_since: float | None = None  # virtual time of its last crash, while down
        self.starting = False
        self.replaying = False
        self._build()

    def _build(self) -> None:
        """A fresh process's parts: state machine, journal, controller (not opened)."""
        self.sm = ControllerStateMachine()
        self.log = Journal(self.dir, self.sm, snapshot_every=SNAPSHOT_EVERY)
        self.controller = Controller(
            self.config,
            self.log,
            self.sm,
            clock=SYSTEM_CLOCK,  # the process clocks read virtual time in the simulation
            notifier=self._notify,
            self_addr=self.addr,
        )
        self.sm.listeners.append(self._on_record)
        self.ctx = contextvars.copy_context()
        self.ctx.run(NODE.set, CTL)

    @property
    def addr(self) -> str:
        return f"{CTL_IP}:{CTL_PORT}"

    async def start(self) -> None:
        task = asyncio.get_running_loop().create_task(self._start(), context=self.ctx)
        await task

    async def _start(self) -> None:
        self.world.net.node_up(CTL)
        self.replaying = True
        try:
            replayed = self.log.open()
        finally:
            self.replaying = False
        server = RemotingServer()
        for code, handler in ControllerProcessor(self.controller).handlers().items():
            server.register(code, handler)
        await server.start(CTL_IP, CTL_PORT)
        self.server = server
        self.controller.housekeeping.start()
        self.up = True
        self.down_since = None
        bid, epoch = self.master()
        if replayed or epoch:
            self.world.log(
                f"controller up: {replayed} event(s) replayed, master id {bid} epoch {epoch}"
            )

    async def crash(self, power: bool) -> list[str]:
        """The process dies: its tasks end, its connections reset (kill) or go silent (power
        loss); the journal keeps what was fsynced, maybe plus a torn record never answered."""
        if not self.up:
            return []
        self.up = False
        world = self.world
        self.down_since = world.loop.time()
        world.net.node_down(CTL, reset_peers=not power)
        loop = asyncio.get_running_loop()
        for _ in range(20):  # cancelled tasks may start others on their way out
            tasks = [t for t in loop.node_tasks.get(CTL, {}) if not t.done()]
            if not tasks:
                break
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=0.5)
        left = [t for t in loop.node_tasks.get(CTL, {}) if not t.done()]
        if left:
            names = sorted({t.get_name() for t in left})
            world.fail(Violation("zombie", f"controller: task(s) {names} outlived the crash"))
        self.log.close()
        self.server = None
        await self.client.close()
        self.client = RemotingClient()
        if power and world.rt_rng.random() < 0.5:
            return [self._tear_tail(world.rt_rng)]
        return []

    async def restart(self) -> None:
        """A new process: nothing of the dead one's memory, the journal replayed."""
        if self.up or self.starting:
            return
        self.starting = True
        try:
            self._build()
            await self.start()
        finally:
            self.starting = False

    def _tear_tail(self, rng) -> str:
        """A power loss inside a write: a prefix of a record that was never answered."""
        payload = json.dumps({"kind": "torn", "pad": "x" * rng.randint(1, 64)}).encode()
        record = struct.pack(">II", len(payload), 0) + payload
        cut = rng.randint(1, len(record) - 1)
        with open(os.path.join(self.dir, "journal"), "ab") as fh:
            fh.write(record[:cut])
        return f"journal torn tail of {cut} bytes"

    async def _notify(self, addr: str, header: dict, body: dict) -> None:
        req = RemotingCommand.request(
            RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, json.dumps(body).encode(), oneway=True
        )
        await self.client.invoke_oneway(addr, req)

    def _on_record(self, record: dict) -> None:
        kind = record.get("kind")
        if self.replaying:
            return  # a restart's replay of what it did before
        if kind == "elected":
            epoch, bid = int(record["masterEpoch"]), int(record["brokerId"])
            self.elections.append((self.world.loop.time(), epoch, bid))
            if epoch <= max(self.handed, default=0):  # handed out before (or a later one)
                self.world.fail(
                    Violation(
                        "epoch-reused",
                        f"the controller elected id {bid} under epoch {epoch}; it handed out "
                        f"epoch {max(self.handed)} before (to id {self.handed[max(self.handed)]})",
                    )
                )
            self.handed[epoch] = bid
            cands = " ".join(
                f"{c['brokerId']}:e{c['epoch']}/{c['maxOffset']}"
                f"{'' if c['inSyncStateSet'] else '-out'}{'' if c['alive'] else '-dead'}"
                for c in record.get("candidates", [])
            )
            self.world.log(
                f"controller: elected id {bid} epoch {epoch}"
                f"{' UNCLEAN' if record.get('unclean') else ''} [{cands}]"
            )
            problem = election_problem(record)
            if problem is not None:
                self.world.fail(Violation("election", problem))
        elif kind == "sync_state_set_changed":
            self.world.log(
                f"controller: SyncStateSet {record.get('memberIds')} "
                f"(set epoch {record.get('syncStateSetEpoch')})"
            )

    # -- what the world reads ------------------------------------------------------------------

    def master(self) -> tuple[int | None, int]:
        """(master broker id or None, master epoch) as the controller's tables hold them."""
        info = self.sm.tables.sync_states.get(self.broker_name)
        if info is None:
            return None, 0
        return info.masterBrokerId, info.masterEpoch

    def sync_state_set(self) -> set[int]:
        info = self.sm.tables.sync_states.get(self.broker_name)
        return set(info.syncStateSet) if info is not None else set()

    def address_of(self, broker_id: int | None) -> str | None:
        replica = self.sm.tables.replicas.get(self.broker_name)
        return replica.address(broker_id) if replica is not None else None

    async def stop(self) -> None:
        if self.up:
            await self.controller.housekeeping.stop()
            for task in list(self.controller.housekeeping_tasks):
                task.cancel()
            if self.server is not None:
                await self.server.stop()
            self.log.close()
            self.up = False
        await self.client.close()


def election_problem(record: dict) -> str | None:
    """What is wrong with an election by its own evidence (the candidates as the controller saw
    them), or None: a clean election takes an alive member of the SyncStateSet, and none of them
    has a newer epoch, or the same epoch and a longer log (leader completeness), unless it is
    the master itself asking for a new epoch after a restart (what it lost was not acknowledged:
    SYNC_FLUSH acknowledges only what the master flushed)."""
    if record.get("unclean") or record.get("designated"):
        return None
    cands = record.get("candidates", [])
    first = all(not c["inSyncStateSet"] for c in cands)  # the group's first election
    pool = [c for c in cands if c["alive"] and (c["inSyncStateSet"] or first)]
    chosen = next((c for c in cands if c["brokerId"] == record["brokerId"]), None)
    if chosen is None or chosen not in pool:
        return f"elected id {record['brokerId']}, not an alive member of the SyncStateSet"
    if record.get("requester") == chosen["brokerId"]:
        return None  # the master restarted and renews its epoch (its lost tail was never acked)
    best = max(pool, key=lambda c: (c["epoch"], c["maxOffset"]))
    if (best["epoch"], best["maxOffset"]) > (chosen["epoch"], chosen["maxOffset"]):
        return (
            f"elected id {chosen['brokerId']} (epoch {chosen['epoch']}, log end "
            f"{chosen['maxOffset']}) over id {best['brokerId']} (epoch {best['epoch']}, log end "
            f"{best['maxOffset']})"
        )
    return None
