"""A simulated broker node: the real ``BrokerNode`` (store, HA, failover, remoting) started in
its own context on the virtual loop, crashed (kill or power loss) and restarted by the world.

The store's flush threads cannot run in a deterministic simulation: inside the simulation
process ``MessageStore.start`` is substituted (``sim_store_start``) by group commit on virtual
time (an fsync takes the node's simulated disk latency; a slow disk is a fault) and a consume
queue flusher task. Everything else is the node's own code.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from typing import TYPE_CHECKING

from broker.config import BrokerConfig
from broker.node import BrokerNode
from tools.sim.invariants import Violation
from tools.sim.vloop import NODE

if TYPE_CHECKING:
    from broker.store.message_store import MessageStore
    from tools.sim.world import World

BROKER_NAME = "broker-a"
LISTEN_PORT = 10911
FILE_SIZE = 64 * 1024


# controller mode, on short timers so a 30 s schedule sees several elections
HEARTBEAT_MS = 500
CONTROLLER_TIMEOUT_MS = 4000
LEASE_MS = 3000  # at most 80 % of the controller's heartbeat timeout
# the SyncStateSet as a controller-mode deployment runs it for haproof's promises (every member
# acks a put; consumers read up to the confirmOffset), on timing that fits 30 s schedules
NOT_CATCHUP_MS = 3000  # haMaxTimeSlaveNotCatchup: a lagging slave leaves the set


def node_config(
    root: str, name: str, ip: str, master_ip: str | None, controller_addr: str | None
) -> BrokerConfig:
    """Controller mode when ``controller_addr`` is given; else broker.conf's classic roles: the
    master (``master_ip`` None) or a slave of ``master_ip``."""
    conf = {
        "storePathRootDir": os.path.join(root, name),
        "brokerName": BROKER_NAME,
        "brokerIP1": ip,
        "listenPort": LISTEN_PORT,
        "nodeName": name,
        "brokerRole": "SYNC_MASTER",  # the role taken when the controller elects this node
        "flushDiskType": "SYNC_FLUSH",
        "mappedFileSizeCommitLog": FILE_SIZE,
        "mappedFileSizeConsumeQueue": 20 * 1024,
        "haSendHeartbeatInterval": 500,
        "haHousekeepingInterval": 3000,
        "syncFlushTimeout": 2000,
    }
    if controller_addr is not None:
        conf.update(
            enableControllerMode=True,
            controllerAddr=controller_addr,
            brokerHeartbeatInterval=HEARTBEAT_MS,
            controllerHeartBeatTimeoutMills=CONTROLLER_TIMEOUT_MS,
            controllerLeaseMills=LEASE_MS,
            syncBrokerMetadataPeriod=2000,
            allAckInSyncStateSet=True,
            minInSyncReplicas=2,  # an ack on two disks (ack-durable), as SYNC_MASTER promises
            haMaxTimeSlaveNotCatchup=NOT_CATCHUP_MS,
        )
    elif master_ip is None:
        conf.update(brokerRole="SYNC_MASTER", brokerId=0)
    else:
        conf.update(
            brokerRole="SLAVE", brokerId=1, haMasterAddress=f"{master_ip}:{LISTEN_PORT + 1}"
        )
    return BrokerConfig.from_dict(conf)


class SimGroupCommit:
    """GroupCommitService on virtual time: one flush per batch after the disk's latency."""

    def __init__(self, store: MessageStore, sim: SimNode) -> None:
        self.store, self.sim, self.gen = store, sim, sim.gen
        self.pending: list = []
        self.scheduled = False
        self.stopped = False
        self.fsyncs = 0

    def submit(self, end_offset: int, waiter) -> None:
        self.submit_many([(end_offset, waiter)])

    def submit_many(self, batch: list) -> None:
        if self.stopped:
            self.store.puts.complete_flush([(w, False) for _, w in batch])
            return
        self.pending.extend(batch)
        if not self.scheduled:
            self.scheduled = True
            loop = asyncio.get_running_loop()
            loop.call_later(self.sim.fsync_latency_s(), self._flush, context=self.sim.ctx)

    def _flush(self) -> None:
        self.scheduled = False
        if self.stopped or self.gen != self.sim.gen:
            return
        flushed = self.store._flush_commit_log(0)
        self.fsyncs += 1
        batch, self.pending = self.pending, []
        self.store.puts.complete_flush([(w, end <= flushed) for end, w in batch])

    def shutdown(self) -> None:
        self.stopped = True
        batch, self.pending = self.pending, []
        self.store.puts.complete_flush([(w, False) for _, w in batch])


def sim_store_start(store: MessageStore) -> None:
    """Substitute for ``MessageStore.start`` inside the simulation (no threads)."""
    sim: SimNode = SimNode.current[NODE.get()]
    store.puts.group_commit = SimGroupCommit(store, sim)
    asyncio.get_running_loop().create_task(_cq_flush_loop(store))
    store.running = True


async def _cq_flush_loop(store: MessageStore) -> None:
    while True:
        await asyncio.sleep(store.config.flush_interval_consume_queue_ms / 1000)
        store._flush_consume_queues()


class SimNode:
    current: dict[str, SimNode] = {}

    def __init__(self, world: World, name: str, ip: str, root: str) -> None:
        self.world, self.name, self.ip, self.root = world, name, ip, root
        self.config: BrokerConfig | None = None
        self.node: BrokerNode | None = None
        self.gen = 0
        self.starting = False  # a start under way (a second one would make two processes)
        self.slow_disk_ms = 0.0
        self.ctx = contextvars.copy_context()
        SimNode.current[name] = self

    @property
    def addr(self) -> str:
        return f"{self.ip}:{LISTEN_PORT}"

    @property
    def up(self) -> bool:
        return self.node is not None

    def durable(self, disk, start: int, end: int) -> bytes:
        """This node's commit log bytes ``[start, end)`` on its simulated disk (one file: a
        record never crosses a file end)."""
        base = start - start % FILE_SIZE
        path = os.path.join(self.root, self.name, "commitlog", f"{base:020d}")
        return disk.durable(path, start - base, end - base)

    def fsync_latency_s(self) -> float:
        return (self.world.rt_rng.uniform(0.1, 2.0) + self.slow_disk_ms) / 1000

    async def start(self, master_ip: str | None = None) -> None:
        """Start in controller mode (a slave of nobody until the controller names its role) or,
        without a controller, from broker.conf: as the master (``master_ip`` None) or a slave of
        ``master_ip``, as an operator edits broker.conf before a restart after a failover."""
        if self.starting or self.node is not None:
            return
        ctl = self.world.ctl
        addr = ctl.addr if ctl is not None else None
        self.config = node_config(self.root, self.name, self.ip, master_ip, addr)
        self.gen += 1
        self.world.net.node_up(self.name)
        self.ctx = contextvars.copy_context()
        self.ctx.run(NODE.set, self.name)
        loop = asyncio.get_running_loop()
        task = loop.create_task(BrokerNode.start(self.config, self.ip), context=self.ctx)
        self.starting = True
        try:
            node = await task
        finally:
            self.starting = False
        node.truncations.add(self._truncated)
        self._watch_truncations(node.store)
        node.role.listeners.append(self._role_changed)
        self.node = node
        self.world.observe_role(self, "start")

    def _watch_truncations(self, store) -> None:
        """Before every truncation, note which acknowledged messages this node's cut range
        holds byte for byte (the check needs them before they are gone)."""
        cut = store.truncate_dirty
        checker = self.world.checker

        def truncate_dirty(offset: int, on_step=None) -> None:
            held = checker.acked_held(store, offset, store.max_phy_offset)
            epochs = [(e.epoch, e.start_offset) for e in self.node.role.epoch_entries]
            self.world.log(f"{self.name} cuts [{offset},{store.max_phy_offset}) epochs {epochs}")
            cut(offset, on_step)
            master = self.world.master()
            master = None if master is self else master
            checker.on_truncated(self.name, offset, held, self.world.fail, master)

        store.truncate_dirty = truncate_dirty

    def _truncated(self, from_offset: int, to_offset: int) -> None:
        self.world.on_truncated(self, from_offset, to_offset)

    def _role_changed(self, old, new, epoch) -> None:
        self.world.observe_role(self, f"{old.value}->{new.value}")

    async def crash(self, power: bool) -> list[str]:
        node = self.node
        if node is None:
            return []
        self.node = None
        self.gen += 1
        world = self.world
        world.net.node_down(self.name, reset_peers=not power)
        loop = asyncio.get_running_loop()
        for _ in range(20):  # cancelled tasks may start others on their way out
            tasks = [t for t in loop.node_tasks.get(self.name, {}) if not t.done()]
            if not tasks:
                break
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=0.5)
        left = [t for t in loop.node_tasks.get(self.name, {}) if not t.done()]
        if left:  # a process's death ends all of it: a task that goes on is a zombie
            names = sorted({t.get_name() for t in left})
            world.fail(Violation("zombie", f"{self.name}: task(s) {names} outlived the crash"))
        node.store.close_abruptly()
        if not power:
            return []
        return world.disk.power_loss(node.store.root, world.rt_rng, tear=True)
