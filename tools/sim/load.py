"""The load of a simulated run: producers sending with SYNC_MASTER to a node that
takes itself for the master
(an acknowledgement is recorded and checked at once), and a consumer pulling from it."""

from __future__ import annotations

import asyncio
import zlib
from typing import TYPE_CHECKING

from contracts.record.model import Message
from contracts.record.reader import decode_record
from tools.sim.invariants import Ack, Violation, log_bytes

if TYPE_CHECKING:
    from tools.sim.world import World


def writer(world: World):
    """Where a producer sends: a node that takes itself for the master (a client's route may be
    stale, so any of them when several do), else nothing."""
    if world.ctl is None:
        return world.master()
    claiming = [s for s in world.nodes.values() if s.up and s.node.role.role.is_master]
    return world.rt_rng.choice(claiming) if claiming else None


async def produce(world: World, pid: int) -> None:
    rng = world.rt_rng
    while world.producing:
        await asyncio.sleep(rng.uniform(0.01, 0.1))
        sim = writer(world)
        if sim is None or not world.producing:
            continue
        if sim.node.gate.refusal is not None:  # the send path answers SERVICE_NOT_AVAILABLE
            continue
        if sim.node.replication.admit_put() is not None:  # minInSyncReplicas: the send path
            continue  # answers IN_SYNC_REPLICAS_NOT_ENOUGH
        node, gen = sim.node, sim.gen
        world.seq += 1
        seq = world.seq
        size = rng.randint(20, 400)
        body = (f"p{pid}-m{seq}-".encode() * (size // 8 + 1))[:size]
        msg = Message(
            topic="T",
            body=body,
            queue_id=seq % 4,
            properties={"KEYS": f"k{seq}"},
            born_host=("127.0.9.9", 5555),
        )
        try:
            if world.ctl is not None:
                world.checker.on_write(sim, node.role.epoch, world.loop.time(), world.ctl)
                world.check_lease(sim)
        except Violation as v:
            world.fail(v)
        try:
            result = await node.store.put_message_async(msg)
            status = await node.await_replication(result)
        except Exception as exc:  # noqa: BLE001 - a put on a node dying under it
            world.log(f"put #{seq} on {sim.name} failed: {type(exc).__name__}")
            continue
        if status.name != "PUT_OK" or sim.gen != gen or not sim.up:
            continue
        offset, n = result.wrote_offset, result.wrote_bytes
        crc = zlib.crc32(log_bytes(node.store, offset, offset + n))
        ack = Ack(seq, offset, n, crc, sim.name, node.role.epoch)
        try:
            world.checker.on_ack(ack, list(world.nodes.values()), world.disk)
        except Violation as v:
            world.fail(v)
        world.log(f"ack #{seq} [{offset},{offset + n}) on {sim.name} epoch {ack.epoch}")
        if world.knobs.crash_after_ack and rng.random() < world.knobs.crash_after_ack:
            world.faults.spawn_crash(sim, True, "after an ack")


async def consume(world: World) -> None:
    """A consumer pulling every queue of T from the master: each read is checked against the
    master's confirmOffset at that moment, as the real code reports it (HAService's status: in
    controller mode the SyncStateSet keeper's, what every member acknowledged; classic: the
    least ack of the in-sync slaves). Strict reads (controller mode) are remembered: a record
    read must be in the final master's log (``read-lost``)."""
    rng = world.rt_rng
    next_offset = world.consumed  # (the offsets task commits these positions)
    while world.producing:
        await asyncio.sleep(rng.uniform(0.05, 0.3))
        sim = world.master()
        if sim is None or sim.node.replication.ha is None:
            continue
        store = sim.node.store
        confirm = sim.node.replication.ha.status()["confirmOffset"]
        for qid in range(4):
            got = store.get_message("T", qid, next_offset[qid], 16)
            for raw in got.records:
                _check_read(world, sim.name, decode_record(raw, 0), raw, confirm)
            next_offset[qid] = got.next_begin_offset


def _check_read(world: World, name: str, rec, raw: bytes, confirm: int) -> None:
    start = rec.stored_physical_offset
    end = start + rec.total_size
    world.reads += 1
    if world.strict_reads:
        world.checker.reads[start] = (end, zlib.crc32(raw[: rec.total_size]))
    if end > confirm:
        world.reads_beyond_confirm += 1
        if world.strict_reads:
            detail = f"read [{start},{end}) from {name} whose confirmOffset is {confirm}"
            world.fail(Violation("read-beyond-confirm", detail))
