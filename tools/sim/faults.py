"""The faults of a simulated run: the schedule's steps applied to the world (kill, power loss,
restart, partitions between nodes and between a node and the controller, heal, slow disks,
wall clock jumps) and the crash points fired from inside the nodes (after a truncation, after an
acknowledgement)."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from tools.sim.controller import CTL
from tools.sim.invariants import Violation
from tools.sim.schedule import Step
from tools.sim.vloop import NODE

if TYPE_CHECKING:
    from tools.sim.node import SimNode
    from tools.sim.world import World


class Faults:
    def __init__(self, world: World) -> None:
        self.world = world

    def spawn_crash(self, sim: SimNode, power: bool, why: str) -> None:
        world = self.world
        if world.stopping:
            return
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, "sim")
        world.loop.create_task(self.crash(sim, power, why), context=ctx)

    async def crash(self, sim: SimNode, power: bool, why: str, down_s: float = 0.0) -> None:
        world = self.world
        if not sim.up:
            return
        notes = await sim.crash(power)
        world.log(
            f"{sim.name} {'power loss' if power else 'killed'} ({why})"
            + "".join(f"; {n}" for n in notes)
        )
        delay = down_s or world.rt_rng.uniform(1.0, 3.0)
        world.loop.call_later(delay, self.spawn_restart, sim)

    def spawn_restart(self, sim: SimNode) -> None:
        world = self.world
        if world.stopping:
            return
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, "sim")
        world.loop.create_task(self.restart(sim), context=ctx)

    async def restart(self, sim: SimNode) -> None:
        """A node restarts in controller mode: a slave of nobody, taking no writes, until the
        controller names its role (a restarted master asks for a new epoch). Without a
        controller it restarts as a slave (its broker.conf edited, as after a manual failover:
        restarting a master that lost its unflushed tail under the same epoch would let a slave
        keep that tail); the operator promotes it again if it is best."""
        world = self.world
        if sim.up:
            return
        master_ip = None
        if world.operator is not None:
            master = world.operator.master
            if master is None or master is sim:
                master = world.nodes["b" if sim.name == "a" else "a"]
            master_ip = master.ip
        try:
            await sim.start(master_ip)
        except Exception as exc:  # noqa: BLE001 - any start failure is the finding
            self.world.fail(Violation("restart-failed", f"{sim.name}: {type(exc).__name__}: {exc}"))

    def pick(self, target: str) -> SimNode | None:
        world = self.world
        up = [s for s in world.nodes.values() if s.up]
        master = world.master() if world.ctl is not None else world.operator.master
        if target == "master":
            pool = [s for s in up if s is master]
        elif target == "slave":
            pool = [s for s in up if s is not master]
        elif target == "down":
            pool = [s for s in world.nodes.values() if not s.up]
        else:
            pool = up
        return world.rt_rng.choice(pool) if pool else None

    async def apply(self, step: Step) -> None:
        world = self.world
        kind = step.kind
        if kind in ("kill", "power", "restart", "slow-disk"):
            sim = self.pick(step.target)
            if sim is None:
                world.log(f"{step.describe()}: no such node now")
                return
            world.log(f"{step.describe()} -> {sim.name}")
            if kind == "restart":
                await self.restart(sim)
            elif kind == "slow-disk":
                sim.slow_disk_ms = step.value
            else:
                await self.crash(sim, kind == "power", f"step {step.index}", step.value)
        elif kind in ("ctl-kill", "ctl-power"):
            await self.crash_controller(step)
        elif kind == "partition":
            self.partition(step)
        elif kind == "heal":
            world.log(step.describe())
            world.net.heal()
            world.ctl_cut.clear()
        elif kind == "fast-disk":
            world.log(step.describe())
            for s in world.nodes.values():
                s.slow_disk_ms = 0.0
        elif kind == "clock-jump":
            sim = world.rt_rng.choice(list(world.nodes.values()))
            skew = world.loop.wall_skew_s
            skew[sim.name] = skew.get(sim.name, 0.0) + step.value / 1000
            world.log(f"{step.describe()} -> {sim.name}")

    async def crash_controller(self, step: Step) -> None:
        world, ctl = self.world, self.world.ctl
        if ctl is None or not ctl.up:
            world.log(f"{step.describe()}: the controller is down")
            return
        notes = await ctl.crash(step.kind == "ctl-power")
        world.log(step.describe() + "".join(f"; {n}" for n in notes))
        world.loop.call_later(step.value, self.spawn_controller_restart)

    def spawn_controller_restart(self) -> None:
        world = self.world
        if world.stopping:
            return
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, "sim")
        world.loop.create_task(self.restart_controller(), context=ctx)

    async def restart_controller(self) -> None:
        try:
            await self.world.ctl.restart()
        except Exception as exc:  # noqa: BLE001 - any start failure is the finding
            self.world.fail(Violation("restart-failed", f"controller: {type(exc).__name__}: {exc}"))

    def partition(self, step: Step) -> None:
        world = self.world
        master = (world.master() if world.ctl else world.operator.master) or world.nodes["a"]
        slaves = [s.name for s in world.nodes.values() if s is not master]
        if step.target == "master-all":
            pairs = [(master.name, s) for s in slaves]
        elif step.target == "slave-slave":
            pairs = [(slaves[0], slaves[1])]
        elif step.target == "master-ctl":  # the master cut from the controller only (#7017)
            pairs = [(master.name, CTL)]
        elif step.target == "master-all-ctl":  # the master alone, its clients still reach it
            pairs = [(master.name, s) for s in (*slaves, CTL)]
        elif step.target == "all-ctl":  # no broker reaches the controller
            pairs = [(s.name, CTL) for s in world.nodes.values()]
        else:
            pairs = [(master.name, world.rt_rng.choice(slaves))]
        now = world.loop.time()
        for x, y in pairs:
            world.net.partition(x, y)
            if y == CTL:  # its lease must end within LEASE_MS from now (``lease-outlived``)
                world.ctl_cut.setdefault(x, now)
        world.log(f"{step.describe()} -> " + ", ".join(f"{x}|{y}" for x, y in pairs))
