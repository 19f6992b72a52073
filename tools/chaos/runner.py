"""One ``haproof chaos`` run: start the group (``cluster.py``), run the clients
(``workload.py``), apply a fault schedule drawn from the seed, heal everything, wait for the
group to converge, then check (``checks.py``).

Faults (each held ``hold_s``, then undone, then the run waits for a writable master again):

- ``kill``: kill -9 a node (the master half the time), restart it;
- ``pause``: SIGSTOP a node, SIGCONT it;
- ``partition``: cut a node off the controller (its proxy black-holes), heal;
- ``lagging-failover``: SIGSTOP a slave until the master dropped it from the SyncStateSet (it
  stays alive to the controller: stopped less than the heartbeat timeout), then SIGCONT it and
  kill -9 the master at once, so the controller must elect the other slave (the stopped one
  lacks acknowledged messages); restart the old master.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.chaos import checks
from tools.chaos.cluster import NODES, RealGroup
from tools.chaos.workload import Consumer, History, observe, produce

KINDS = ("kill", "pause", "partition", "lagging-failover")
LAG_S = 2.2  # > haMaxTimeSlaveNotCatchup (1.5 s) + a shrink, < the heartbeat timeout (3 s)
SETTLE_MS = 30_000
CONVERGE_MS = 60_000
POLL_S = 0.1


@dataclass(frozen=True)
class Fault:
    kind: str
    on_master: bool
    hold_s: float
    gap_s: float  # load before the fault


def schedule(seed: int, rounds: int, kinds: tuple[str, ...]) -> list[Fault]:
    rng = random.Random(seed)
    return [
        Fault(
            rng.choice(kinds),
            rng.random() < 0.5,
            round(rng.uniform(1.0, 4.0), 2),
            round(rng.uniform(1.0, 3.0), 2),
        )
        for _ in range(rounds)
    ]


@dataclass
class Outcome:
    summary: dict
    failed: bool


async def _master_name(group: RealGroup) -> str | None:
    addr, _ = await group.replica_info()
    return group.name_at(addr) if addr else None


async def _pick(group: RealGroup, rng: random.Random, on_master: bool) -> tuple[str, str | None]:
    """(the fault's node, the master's name or None)."""
    master = await _master_name(group)
    others = [n for n in NODES if n != master and group.up(n)]
    if on_master and master is not None:
        return master, master
    return (rng.choice(others) if others else rng.choice(NODES)), master


async def apply(group: RealGroup, fault: Fault, rng: random.Random, history: History) -> None:
    name, master = await _pick(group, rng, fault.on_master)
    if fault.kind == "lagging-failover" and master is not None and name != master:
        history.add("fault", kind="pause", node=name)
        group.pause(name)
        await asyncio.sleep(LAG_S)
        group.resume(name)
        group.kill(master)
        history.add("fault", kind="resume+kill", node=name, killed=master)
        await asyncio.sleep(max(fault.hold_s, 4.0))
        await group.restart(master)
        history.add("fault", kind="restart", node=master)
        return
    kind = "kill" if fault.kind == "lagging-failover" else fault.kind
    history.add("fault", kind=kind, node=name, hold_s=fault.hold_s)
    undo = {"kill": group.restart, "pause": group.resume, "partition": group.heal}[kind]
    {"kill": group.kill, "pause": group.pause, "partition": group.partition}[kind](name)
    await asyncio.sleep(fault.hold_s)
    result = undo(name)
    if asyncio.iscoroutine(result):
        await result
    history.add("fault", kind=f"undo-{kind}", node=name)


async def _writable(group: RealGroup, timeout_ms: int) -> bool:
    deadline = time.monotonic() + timeout_ms / 1000
    while time.monotonic() < deadline:
        addr, _ = await group.replica_info()
        doc = await group.status(addr) if addr else None
        if doc is not None and str(doc.get("brokerRole", "")).endswith("MASTER"):
            return True
        await asyncio.sleep(POLL_S)
    return False


async def converge(group: RealGroup, timeout_ms: int = CONVERGE_MS) -> tuple[str, dict] | None:
    """(master, each node's status) once the controller's master has every other node as a
    slave at its own log end; None if that does not happen in ``timeout_ms``."""
    deadline = time.monotonic() + timeout_ms / 1000
    while time.monotonic() < deadline:
        addr, _ = await group.replica_info()
        master = group.name_at(addr) if addr else None
        if master is not None:
            docs = {n: await group.status(group.addr(n)) for n in NODES}
            if all(docs.values()) and _caught_up(master, docs):
                return master, docs
        await asyncio.sleep(POLL_S * 3)
    return None


def _caught_up(master: str, docs: dict) -> bool:
    end = docs[master]["maxOffset"]
    return str(docs[master].get("brokerRole", "")).endswith("MASTER") and all(
        doc["brokerRole"] == "SLAVE" and doc["maxOffset"] == end
        for n, doc in docs.items()
        if n != master
    )


async def run(
    workdir: Path,
    seed: int,
    rounds: int,
    kinds: tuple[str, ...],
    planted_bug: str | None = None,
    producers: int = 2,
    strict_reads: bool = True,
) -> Outcome:
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    history = History(workdir / "history.jsonl")
    group = await RealGroup.start(workdir, planted_bug)
    try:
        return await _run(
            group, history, seed, rounds, kinds, planted_bug, producers, strict_reads, started
        )
    finally:
        history.close()
        await group.close()


async def _run(
    group, history, seed, rounds, kinds, planted_bug, producers, strict_reads, started
) -> Outcome:
    violations: dict[str, str] = {}
    if not await _writable(group, 60_000):
        violations["no-master"] = "no writable master 60 s after the start"
    stop = asyncio.Event()
    tasks = [
        asyncio.ensure_future(produce(group, history, f"p{i}", stop)) for i in range(producers)
    ]
    tasks += [
        asyncio.ensure_future(Consumer(group, history).run(stop)),
        asyncio.ensure_future(observe(group, history, stop)),
    ]
    rng = random.Random(seed + 1)
    faults = schedule(seed, rounds, kinds)
    for fault in faults:
        await asyncio.sleep(fault.gap_s)
        await apply(group, fault, rng, history)
        if not await _writable(group, SETTLE_MS):
            history.add("unsettled", after=asdict(fault))
    await asyncio.sleep(1.0)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for name in NODES:
        group.heal(name)
        group.resume(name)
        if not group.up(name):
            await group.restart(name)
    final = None
    ended = await converge(group)
    if ended is None:
        violations["no-convergence"] = f"no master with caught-up slaves {CONVERGE_MS} ms after"
    else:
        master, docs = ended
        await group.stop_nodes()
        stores = {n: group.store(n) for n in NODES}
        final = checks.Final.read(master, {n: d["maxOffset"] for n, d in docs.items()}, stores)
    found = checks.check_all(history.ops, final, group.archive, group.name_at)
    violations.update(found.pop("violations"))
    if found["reads_beyond_confirm"] and strict_reads:
        violations["read-beyond-confirm"] = found["first_beyond_confirm"]
    summary = {
        "seed": seed,
        "rounds": rounds,
        "faults": [f.kind for f in faults],
        "planted_bug": planted_bug,
        "violations": violations,
        **found,
        "history": str(history.path),
        "wall_s": round(time.monotonic() - started, 1),
    }
    return Outcome(summary, bool(violations))
