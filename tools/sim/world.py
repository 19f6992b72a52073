"""One simulated run: three real nodes, producers, the operator, a fault schedule, invariants.

``run_seed(seed, ...)`` builds a fresh world in a temp dir on a fresh virtual loop, runs the
schedule for ``seconds`` of simulated time, then stops the faults (heal, restart, normal disks),
waits for the group to converge and checks the final invariants. Everything random comes from
``random.Random`` generators seeded by the seed (the schedule's apart from the run's, so the
shrinker can drop steps), and Python's own ``random`` module is seeded too (the HA client's
backoff jitter uses it).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field

from broker import planted_bugs
from broker.store import message_store
from tools.sim.disk import SimDisk
from tools.sim.invariants import Checker, Violation, log_bytes
from tools.sim.load import consume, produce
from tools.sim.net import SimNetwork
from tools.sim.node import SimNode, sim_store_start
from tools.sim.operator import Operator
from tools.sim.schedule import Knobs, Step, draw
from tools.sim.vloop import NODE, VirtualLoop, virtual_time

NAMES = ("a", "b", "c")
IPS = {"a": "127.0.1.1", "b": "127.0.1.2", "c": "127.0.1.3"}
CHECK_EVERY_S = 1.0
CONVERGE_S = 60.0


@dataclass
class Outcome:
    seed: int
    steps: list[Step]
    violation: Violation | None
    trace: list[str] = field(default_factory=list)
    simulated_s: float = 0.0
    acks: int = 0
    reads: int = 0
    reads_beyond_confirm: int = 0

    @property
    def failed(self) -> bool:
        return self.violation is not None


class World:
    def __init__(self, seed: int, seconds: float, steps: list[Step], knobs: Knobs, root: str):
        self.seed, self.seconds, self.steps, self.knobs = seed, seconds, steps, knobs
        self.rt_rng = random.Random(seed * 7919 + 17)
        self.loop = asyncio.get_running_loop()
        self.net = SimNetwork(self.rt_rng, {ip: n for n, ip in IPS.items()})
        self.loop.net = self.net
        self.disk = SimDisk()
        self.checker = Checker()
        self.trace: list[str] = []
        self.nodes = {n: SimNode(self, n, IPS[n], root) for n in NAMES}
        self.operator = Operator(self)
        self.pending: list[Violation] = []
        self.producing = True
        self.stopping = False  # tearing down: no more crashes or restarts
        self.reads = 0
        self.reads_beyond_confirm = 0
        self.strict_reads = False  # read-beyond-confirm a violation (needs #30's read gating)
        # the operator's master restarts as a master from its broker.conf (an open finding)
        self.masters_restart_as_masters = False
        self.seq = 0

    def log(self, text: str) -> None:
        self.trace.append(f"t={self.loop.time() - 1000:9.3f} {text}")

    def fail(self, violation: Violation) -> None:
        """A violation seen inside a node's callback: raised by the driver at its next check."""
        if not self.pending:
            self.log(f"VIOLATION {violation}")
            self.pending.append(violation)

    def check_pending(self) -> None:
        if self.pending:
            raise self.pending[0]

    # -- observations from the nodes -----------------------------------------------------------

    def observe_role(self, sim: SimNode, why: str) -> None:
        node = sim.node
        if node is None:
            return
        role = node.role
        self.log(f"{sim.name} {why}: {role.role.value} epoch {role.epoch} "
                 f"end {node.store.max_phy_offset}")  # fmt: skip
        try:
            self.checker.observe(sim.name, role.role.is_master, role.epoch)
        except Violation as v:
            self.fail(v)

    def on_truncated(self, sim: SimNode, from_offset: int, to_offset: int) -> None:
        self.log(f"{sim.name} truncated [{to_offset},{from_offset})")
        if self.knobs.crash_after_truncation:
            delay = self.rt_rng.uniform(0.0, 0.003)
            self.loop.call_later(delay, self._spawn_crash, sim, True, "after truncation")

    def _spawn_crash(self, sim: SimNode, power: bool, why: str) -> None:
        if self.stopping:
            return
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, "sim")
        self.loop.create_task(self.crash(sim, power, why), context=ctx)

    async def crash(self, sim: SimNode, power: bool, why: str) -> None:
        if not sim.up:
            return
        notes = await sim.crash(power)
        self.log(f"{sim.name} {'power loss' if power else 'killed'} ({why})"
                 + "".join(f"; {n}" for n in notes))  # fmt: skip
        delay = self.rt_rng.uniform(1.0, 3.0)
        self.loop.call_later(delay, self._spawn_restart, sim)

    def _spawn_restart(self, sim: SimNode) -> None:
        if self.stopping:
            return
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, "sim")
        self.loop.create_task(self.restart(sim), context=ctx)

    async def restart(self, sim: SimNode) -> None:
        if sim.up:
            return
        # A node restarts as a slave (its broker.conf edited, as after a manual failover):
        # restarting a master that lost its unflushed tail under the same epoch would let a
        # slave keep that tail (see the README); the operator promotes it again if it is best.
        master = self.operator.master
        as_master = self.masters_restart_as_masters and master is sim
        if master is None or master is sim:
            master = self.nodes["b" if sim.name == "a" else "a"]
        try:
            await sim.start(None if as_master else master.ip)
        except Exception as exc:  # noqa: BLE001 - any start failure is the finding
            self.fail(Violation("restart-failed", f"{sim.name}: {type(exc).__name__}: {exc}"))

    # -- the schedule --------------------------------------------------------------------------

    def pick(self, target: str) -> SimNode | None:
        up = [s for s in self.nodes.values() if s.up]
        master = self.operator.master
        if target == "master":
            pool = [s for s in up if s is master]
        elif target == "slave":
            pool = [s for s in up if s is not master]
        elif target == "down":
            pool = [s for s in self.nodes.values() if not s.up]
        else:
            pool = up
        return self.rt_rng.choice(pool) if pool else None

    async def apply(self, step: Step) -> None:
        kind = step.kind
        if kind in ("kill", "power", "restart", "slow-disk"):
            sim = self.pick(step.target)
            if sim is None:
                self.log(f"{step.describe()}: no such node now")
                return
            self.log(f"{step.describe()} -> {sim.name}")
            if kind == "restart":
                await self.restart(sim)
            elif kind == "slow-disk":
                sim.slow_disk_ms = step.value
            else:
                await self.crash(sim, kind == "power", f"step {step.index}")
        elif kind == "partition":
            self.partition(step)
        elif kind == "heal":
            self.log(step.describe())
            self.net.heal()
        elif kind == "fast-disk":
            self.log(step.describe())
            for s in self.nodes.values():
                s.slow_disk_ms = 0.0
        elif kind == "clock-jump":
            sim = self.rt_rng.choice(list(self.nodes.values()))
            skew = self.loop.wall_skew_s
            skew[sim.name] = skew.get(sim.name, 0.0) + step.value / 1000
            self.log(f"{step.describe()} -> {sim.name}")

    def partition(self, step: Step) -> None:
        master = self.operator.master or self.nodes["a"]
        slaves = [s for s in self.nodes.values() if s is not master]
        if step.target == "master-all":
            pairs = [(master, s) for s in slaves]
        elif step.target == "slave-slave":
            pairs = [(slaves[0], slaves[1])]
        else:
            pairs = [(master, self.rt_rng.choice(slaves))]
        for x, y in pairs:
            self.net.partition(x.name, y.name)
        self.log(f"{step.describe()} -> " + ", ".join(f"{x.name}|{y.name}" for x, y in pairs))

    def check(self) -> None:
        self.check_pending()
        for sim in self.nodes.values():
            if sim.up:
                role = sim.node.role
                self.checker.observe(sim.name, role.role.is_master, role.epoch)
        master = self.operator.master
        if master is not None and master.up and master.node.role.role.is_master:
            self.checker.log_matching(master, [s for s in self.nodes.values() if s is not master])

    async def run(self) -> None:
        self.operator.master = self.nodes["a"]
        for name in NAMES:
            await self.nodes[name].start(None if name == "a" else IPS["a"])
        op_ctx = contextvars.copy_context()
        op_ctx.run(NODE.set, "op")
        background = [self.loop.create_task(self.operator.run(), context=op_ctx)]
        background.append(self.loop.create_task(consume(self), context=op_ctx))
        for pid in range(self.knobs.producers):
            background.append(self.loop.create_task(produce(self, pid), context=op_ctx))
        start = self.loop.time()
        try:
            next_check = start + CHECK_EVERY_S
            for step in self.steps:
                while start + step.at_s > next_check:
                    await asyncio.sleep(next_check - self.loop.time())
                    self.check()
                    next_check += CHECK_EVERY_S
                await asyncio.sleep(max(0.0, start + step.at_s - self.loop.time()))
                await self.apply(step)
                self.check()
            while self.loop.time() < start + self.seconds:
                await asyncio.sleep(min(CHECK_EVERY_S, start + self.seconds - self.loop.time()))
                self.check()
            await self.settle()
        finally:
            self.producing = False
            for t in background:
                t.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    async def settle(self) -> None:
        """Faults stop; the group must converge; then the final checks."""
        self.producing = False
        self.log("faults stop: heal, restart, normal disks")
        self.net.heal()
        for sim in self.nodes.values():
            sim.slow_disk_ms = 0.0
            await self.restart(sim)
        self.check_pending()
        deadline = self.loop.time() + CONVERGE_S
        while not self.converged():
            if self.loop.time() > deadline:
                raise Violation("no-convergence", self.describe_state())
            await asyncio.sleep(0.5)
            self.check()
        self.check()
        master = self.operator.master
        self.checker.final(master)
        for sim in self.nodes.values():
            end = sim.node.store.max_phy_offset
            digest = zlib.crc32(log_bytes(sim.node.store, 0, end))
            self.log(f"final {sim.name}: {sim.node.role.role.value} epoch "
                     f"{sim.node.role.epoch} end {end} crc {digest:08x}")  # fmt: skip

    def converged(self) -> bool:
        master = self.operator.master
        if master is None or not master.up or not master.node.role.role.is_master:
            return False
        end = master.node.store.max_phy_offset
        for sim in self.nodes.values():
            if sim is master:
                continue
            if not sim.up or sim.node.role.role.is_master:
                return False
            if sim.node.store.max_phy_offset != end:
                return False
        return True

    def describe_state(self) -> str:
        parts = []
        for sim in self.nodes.values():
            if not sim.up:
                parts.append(f"{sim.name} down")
                continue
            r = sim.node.role
            parts.append(f"{sim.name} {r.role.value} epoch {r.epoch} end "
                         f"{sim.node.store.max_phy_offset}")  # fmt: skip
        master = self.operator.master
        return f"operator's master {master.name if master else None}; " + "; ".join(parts)


async def _run(world: World) -> None:
    try:
        await world.run()
    finally:
        world.stopping = True
        for sim in world.nodes.values():
            if sim.up:
                await sim.crash(power=False)


def run_seed(
    seed: int,
    seconds: float = 30.0,
    bugs: frozenset[str] = frozenset(),
    keep: set[int] | None = None,
    strict_reads: bool = False,
    masters_restart_as_masters: bool = False,
) -> Outcome:
    """One schedule. ``keep``: the indices of the schedule's steps to run (None: all);
    ``strict_reads``: a read beyond the master's confirmOffset is a violation."""
    steps, knobs = draw(seed, seconds)
    if keep is not None:
        steps = [s for s in steps if s.index in keep]
    root = tempfile.mkdtemp(prefix=f"haproof-sim-{seed}-", dir=_sim_dir())
    loop = VirtualLoop()
    saved_start = message_store.MessageStore.start
    saved_random = random.getstate()
    outcome = Outcome(seed, steps, None)
    planted_bugs.switch_on(bugs)
    random.seed(seed)
    message_store.MessageStore.start = sim_store_start
    logging.disable(logging.CRITICAL)
    try:
        with virtual_time(loop):
            asyncio.set_event_loop(loop)
            world = loop.run_until_complete(_make_world(seed, seconds, steps, knobs, root))
            world.strict_reads = strict_reads
            world.masters_restart_as_masters = masters_restart_as_masters
            try:
                loop.run_until_complete(_run(world))
            except Violation as v:
                world.log(f"VIOLATION {v}")
                outcome.violation = v
            outcome.trace = world.trace
            outcome.simulated_s = loop.time() - 1000
            outcome.acks = len(world.checker.acks)
            outcome.reads = world.reads
            outcome.reads_beyond_confirm = world.reads_beyond_confirm
    finally:
        logging.disable(logging.NOTSET)
        message_store.MessageStore.start = saved_start
        planted_bugs.switch_off()
        random.setstate(saved_random)
        world_loop_close(loop)
        shutil.rmtree(root, ignore_errors=True)
    return outcome


async def _make_world(seed, seconds, steps, knobs, root) -> World:
    world = World(seed, seconds, steps, knobs, root)
    world.disk.install()
    return world


def world_loop_close(loop: VirtualLoop) -> None:
    from broker.store import mapped_file

    mapped_file.durability_observer = None
    loop.set_exception_handler(lambda _loop, _context: None)  # the world is gone
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        try:
            loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
        except Exception:  # noqa: BLE001 - tearing down a finished world
            pass
    asyncio.set_event_loop(None)
    loop.close()


def _sim_dir() -> str | None:
    """Where the simulated disks live: tmpfs when there is one (a real fsync there costs
    nothing; durability is the disk model's business), else the temp dir."""
    import os

    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
