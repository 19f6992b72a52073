"""The operator of the simulated group, standing in for the controller of issue #30 until the
simulation runs it (the controller is on main; its broker side is not wired into nodes yet): it
fails over through the existing promotion path (``broker.ha.failover.promote``, what
``haproof admin promote`` runs, over the simulated network) and points stray nodes at the
master with the same NOTIFY_BROKER_ROLE_CHANGED.

Its policy is the safe one for a group without a SyncStateSet: fail over only when the master
is gone and every other node is up, and promote the node with the highest (epoch of its last byte, log end) --
with SYNC_FLUSH acks that node holds every acknowledged message.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from broker.config import BrokerRole
from broker.ha.failover import UncleanPromotionError, _notify, promote
from broker.remoting.client import RemotingClient
from broker.store.epoch import held_epoch
from contracts.errors import HaproofError
from tools.sim.node import BROKER_NAME

if TYPE_CHECKING:
    from tools.sim.node import SimNode
    from tools.sim.world import World

TICK_S = 1.0
GRACE_TICKS = 2  # ticks the master must be gone before a failover


class Operator:
    def __init__(self, world: World) -> None:
        self.world = world
        self.master: SimNode | None = None
        self.missing = 0
        self.epoch = 1  # the newest epoch it handed out or saw (a controller remembers them)

    async def run(self) -> None:
        client = RemotingClient()
        try:
            while True:
                await asyncio.sleep(TICK_S)
                try:
                    await self.tick(client)
                except HaproofError as exc:
                    self.world.log(f"operator: {exc}")
                except (AttributeError, OSError) as exc:  # a node gone during a step: next tick
                    self.world.log(f"operator: {type(exc).__name__}: {exc}")
        finally:
            await client.close()

    def best(self, nodes: list[SimNode]) -> SimNode:
        def rank(s: SimNode):
            end = s.node.store.max_phy_offset  # as promote ranks: the epoch of the bytes held
            return (held_epoch(s.node.role.epoch_entries, end), end, s.name)

        return max(nodes, key=rank)

    def track_master(self, up: list[SimNode]) -> None:
        """The master as a name server sees it: the claiming node of the newest epoch, taken
        whenever the one this operator knows is down, not claiming (a promotion that raised
        half-way: seed 900000749) or behind it."""
        claiming = [s for s in up if s.node.role.role.is_master]
        if claiming:
            newest = max(claiming, key=lambda s: (s.node.role.epoch, s.name))
            current = self.master
            if (
                current is None
                or not current.up
                or not current.node.role.role.is_master
                or newest.node.role.epoch > current.node.role.epoch
            ):
                self.master = newest

    async def tick(self, client: RemotingClient) -> None:
        world = self.world
        up = [s for s in world.nodes.values() if s.up]
        self.track_master(up)
        master = self.master
        # a master behind an epoch another node holds is stale: a promotion whose notices did
        # not all land left it claiming while the others moved on, and they refuse to follow it
        newest_epoch = max((s.node.role.epoch for s in up), default=0)
        if (
            master is not None
            and master.up
            and master.node.role.role.is_master
            and master.node.role.epoch >= newest_epoch
        ):
            self.missing = 0
            await self.fix_strays(client, master, up)
            return
        self.missing += 1
        if len(up) < len(world.nodes) - (0 if master is not None and master.up else 1):
            return  # a node that may hold acknowledged bytes is down: wait for it
        if master is not None and not master.up and self.missing < GRACE_TICKS:
            return
        target = self.best(up)
        if world.knobs.careless and world.rt_rng.random() < 0.5:
            target = world.rt_rng.choice(up)  # as a hurried person might; promote must refuse
        world.log(
            f"operator: promote {target.name} (master {master.name if master else None} "
            f"{'up' if master and master.up else 'down'})"
        )
        self.epoch = max([self.epoch] + [s.node.role.epoch for s in up]) + 1
        addrs = [s.addr for s in world.nodes.values()]  # the whole group, as the name server
        try:
            result = await promote(
                BROKER_NAME, target.name, broker_addrs=addrs, min_epoch=self.epoch
            )
        except UncleanPromotionError as exc:
            world.log(f"operator: refused: {exc}")
            up = [
                s for s in world.nodes.values() if s.up
            ]  # who is up now (the await let faults in)
            target = self.best(up)
            result = await promote(
                BROKER_NAME, target.name, broker_addrs=addrs, min_epoch=self.epoch
            )
        world.log(
            f"operator: {target.name} is master under epoch {result['epoch']}"
            + (f", unreachable {result['unreachable']}" if result["unreachable"] else "")
        )
        self.master = target
        self.missing = 0

    async def fix_strays(self, client: RemotingClient, master: SimNode, up: list[SimNode]):
        """Point every up node that is not the master's slave at the master."""
        doc = master.node.failover.describe()
        ha_addr = master.node.config.ha_server_addr
        for s in up:
            if s is master or not s.up:  # (a node may go down while the step awaits)
                continue
            role = s.node.role
            if not role.role.is_master and role.master_ha_addr == ha_addr:
                continue
            self.world.log(f"operator: point {s.name} at master {master.name}")
            await _notify(
                client,
                s.addr,
                doc,
                master.node.role.epoch,
                BrokerRole.SYNC_MASTER,
                role.broker_id or 1,
            )
