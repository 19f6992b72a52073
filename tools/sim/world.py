"""One simulated run: three real nodes in controller mode, the real controller, producers and a
consumer, a fault schedule, invariants.

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
from tools.sim.controller import CTL, CTL_IP, SimController
from tools.sim.disk import SimDisk
from tools.sim.faults import Faults
from tools.sim.invariants import Checker, Violation, log_bytes
from tools.sim.load import consume, produce
from tools.sim.net import SimNetwork
from tools.sim.node import BROKER_NAME, LEASE_MS, SimNode, sim_store_start
from tools.sim.offsets import offsets
from tools.sim.operator import Operator
from tools.sim.schedule import Knobs, Step, draw
from tools.sim.vloop import NODE, VirtualLoop, virtual_time

NAMES = ("a", "b", "c")
IPS = {"a": "127.0.1.1", "b": "127.0.1.2", "c": "127.0.1.3"}
# planted bugs whose site is in the controller or its client: they need controller mode
CONTROLLER_BUGS = frozenset({"election-overflow", "write-after-lease", "offset-copy"})
CHECK_EVERY_S = 1.0
CONVERGE_S = 60.0
LEASE_SLACK_S = 0.01  # the lease watch fences 1 ms after the lease's end


@dataclass
class Outcome:
    seed: int
    steps: list[Step]
    violation: Violation | None
    trace: list[str] = field(default_factory=list)
    simulated_s: float = 0.0
    acks: int = 0
    needless_cuts: int = 0
    controller: bool = False
    reads: int = 0
    reads_beyond_confirm: int = 0
    reads_lost: int = 0
    offset_answers: int = 0

    @property
    def failed(self) -> bool:
        return self.violation is not None


class World:
    def __init__(
        self,
        seed: int,
        seconds: float,
        steps: list[Step],
        knobs: Knobs,
        root: str,
        controller: bool,
    ):
        self.seed, self.seconds, self.steps, self.knobs = seed, seconds, steps, knobs
        self.rt_rng = random.Random(seed * 7919 + 17)
        self.loop = asyncio.get_running_loop()
        self.net = SimNetwork(self.rt_rng, {**{ip: n for n, ip in IPS.items()}, CTL_IP: CTL})
        self.loop.net = self.net
        self.disk = SimDisk()
        self.checker = Checker()
        self.trace: list[str] = []
        # the real controller elects; without it, the operator promotes (the classic mode)
        self.ctl = SimController(self, BROKER_NAME, root) if controller else None
        self.operator = None if controller else Operator(self)
        self.checker.node_epochs_monotonic = not controller
        self.nodes = {n: SimNode(self, n, IPS[n], root) for n in NAMES}
        self.faults = Faults(self)
        self.pending: list[Violation] = []
        self.producing = True
        self.stopping = False  # tearing down: no more crashes or restarts
        self.reads = 0
        self.reads_beyond_confirm = 0
        self.strict_reads = controller  # read-beyond-confirm a violation (the read gate's promise)
        self.seq = 0
        self.ctl_cut: dict[str, float] = {}  # node -> since when it cannot reach the controller
        self.consumed = dict.fromkeys(range(4), 0)  # the consumer's next offset per queue
        self.offset_answers = 0

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
        self.log(
            f"{sim.name} {why}: {role.role.value} epoch {role.epoch} "
            f"end {node.store.max_phy_offset}"
        )
        try:
            self.checker.observe(sim.name, role.role.is_master, role.epoch)
        except Violation as v:
            self.fail(v)

    def on_truncated(self, sim: SimNode, from_offset: int, to_offset: int) -> None:
        self.log(f"{sim.name} truncated [{to_offset},{from_offset})")
        if self.knobs.crash_after_truncation:
            delay = self.rt_rng.uniform(0.0, 0.003)
            self.loop.call_later(delay, self.faults.spawn_crash, sim, True, "after truncation")

    def check_lease(self, sim: SimNode) -> None:
        """A write accepted by ``sim`` (controller mode): not after its lease must have ended,
        ``LEASE_MS`` after it lost the controller (cut from it, or the controller down: every
        heartbeat acknowledged before was sent before)."""
        ctl = self.ctl
        lost = [t for t in (self.ctl_cut.get(sim.name), ctl.down_since) if t is not None]
        if lost and self.loop.time() > min(lost) + LEASE_MS / 1000 + LEASE_SLACK_S:
            since = min(lost) - 1000
            self.fail(
                Violation(
                    "lease-outlived",
                    f"{sim.name} accepted a write at t={self.loop.time() - 1000:.3f}, its lease "
                    f"of {LEASE_MS} ms ended after it lost the controller at t={since:.3f}",
                )
            )

    def master(self) -> SimNode | None:
        """The node the controller (the operator) names master, when it is up and has taken the
        role."""
        m = self.named_master()
        return m if m is not None and m.node.role.role.is_master else None

    def named_master(self) -> SimNode | None:
        """The node the controller (the operator) names master, when it is up, whether or not
        it has taken the role yet: where a client with the route goes (a restarted master the
        controller still names answers as a slave of nobody until it is elected again)."""
        if self.ctl is None:
            m = self.operator.master
            return m if m is not None and m.up else None
        addr = self.ctl.address_of(self.ctl.master()[0])
        return next((s for s in self.nodes.values() if s.addr == addr and s.up), None)

    def check(self) -> None:
        self.check_pending()
        for sim in self.nodes.values():
            if sim.up:
                role = sim.node.role
                self.checker.observe(sim.name, role.role.is_master, role.epoch)
        if self.ctl is not None and self.ctl.up:  # (a restart's replay must not go back)
            self.checker.observe_controller(self.ctl.master()[1])
        master = self.master()
        if master is not None:
            self.checker.log_matching(master, [s for s in self.nodes.values() if s is not master])

    async def run(self) -> None:
        if self.ctl is not None:
            await self.ctl.start()
        else:
            self.operator.master = self.nodes["a"]
        for name in NAMES:
            await self.nodes[name].start(None if name == "a" or self.ctl else IPS["a"])
        op_ctx = contextvars.copy_context()
        op_ctx.run(NODE.set, "op")
        background = [self.loop.create_task(consume(self), context=op_ctx)]
        if self.ctl is not None:  # (classic mode's schedules stay as they were)
            background.append(self.loop.create_task(offsets(self, self.consumed), context=op_ctx))
        if self.operator is not None:
            background.append(self.loop.create_task(self.operator.run(), context=op_ctx))
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
                await self.faults.apply(step)
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
        self.ctl_cut.clear()
        if self.ctl is not None:
            await self.faults.restart_controller()
        for sim in self.nodes.values():
            sim.slow_disk_ms = 0.0
            await self.faults.restart(sim)
        self.check_pending()
        deadline = self.loop.time() + CONVERGE_S
        while not self.converged():
            if self.loop.time() > deadline:
                raise Violation("no-convergence", self.describe_state())
            await asyncio.sleep(0.5)
            self.check()
        self.check()
        master = self.master()
        self.checker.final(master)
        for sim in self.nodes.values():
            end = sim.node.store.max_phy_offset
            digest = zlib.crc32(log_bytes(sim.node.store, 0, end))
            self.log(
                f"final {sim.name}: {sim.node.role.role.value} epoch "
                f"{sim.node.role.epoch} end {end} crc {digest:08x}"
            )

    def converged(self) -> bool:
        master = self.master()
        if master is None or master.node.gate.refusal is not None:
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
            parts.append(
                f"{sim.name} {r.role.value} epoch {r.epoch} end {sim.node.store.max_phy_offset}"
            )
        if self.ctl is None:
            m = self.operator.master
            return f"operator's master {m.name if m else None}; " + "; ".join(parts)
        bid, epoch = self.ctl.master()
        return f"controller's master id {bid} epoch {epoch}; " + "; ".join(parts)


async def _run(world: World) -> None:
    try:
        await world.run()
    finally:
        world.stopping = True
        for sim in world.nodes.values():
            if sim.up:
                await sim.crash(power=False)
        if world.ctl is not None:
            await world.ctl.stop()


def run_seed(
    seed: int,
    seconds: float = 30.0,
    bugs: frozenset[str] = frozenset(),
    keep: set[int] | None = None,
    strict_reads: bool | None = None,
    controller: bool = False,
    steps: list[Step] | None = None,
) -> Outcome:
    """One schedule. ``keep``: the indices of the schedule's steps to run (None: all);
    ``strict_reads``: a read beyond the master's confirmOffset is a violation (None: in
    controller mode, whose nodes gate reads at it; classic HA serves them); ``controller``:
    the real controller elects (else the operator promotes); ``steps``: these steps instead
    of the seed's (a test's hand-written schedule; the seed still draws everything else)."""
    controller = controller or bool(bugs & CONTROLLER_BUGS)
    drawn, knobs = draw(seed, seconds, controller)
    steps = drawn if steps is None else steps
    if keep is not None:
        steps = [s for s in steps if s.index in keep]
    root = tempfile.mkdtemp(prefix=f"haproof-sim-{seed}-", dir=_sim_dir())
    loop = VirtualLoop()
    saved_start = message_store.MessageStore.start
    saved_random = random.getstate()
    outcome = Outcome(seed, steps, None, controller=controller)
    planted_bugs.switch_on(bugs)
    planted_bugs.OVERFLOW_BITS = 10  # the simulated logs hold kilobytes, not gigabytes
    random.seed(seed)
    message_store.MessageStore.start = sim_store_start
    logging.disable(logging.CRITICAL)
    try:
        with virtual_time(loop):
            asyncio.set_event_loop(loop)
            world = loop.run_until_complete(
                _make_world(seed, seconds, steps, knobs, root, controller)
            )
            world.strict_reads = controller if strict_reads is None else strict_reads
            try:
                loop.run_until_complete(_run(world))
            except Violation as v:
                world.log(f"VIOLATION {v}")
                outcome.violation = v
            outcome.trace = world.trace
            outcome.simulated_s = loop.time() - 1000
            outcome.acks = len(world.checker.acks)
            outcome.needless_cuts = world.checker.needless_cuts
            outcome.reads = world.reads
            outcome.reads_beyond_confirm = world.reads_beyond_confirm
            outcome.reads_lost = world.checker.reads_lost
            outcome.offset_answers = world.offset_answers
    finally:
        logging.disable(logging.NOTSET)
        message_store.MessageStore.start = saved_start
        planted_bugs.switch_off()
        planted_bugs.OVERFLOW_BITS = 32
        random.setstate(saved_random)
        world_loop_close(loop)
        shutil.rmtree(root, ignore_errors=True)
    return outcome


async def _make_world(seed, seconds, steps, knobs, root, controller) -> World:
    world = World(seed, seconds, steps, knobs, root, controller)
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
