"""The consumer's offsets in a simulated run: it commits what it consumed
(UPDATE_CONSUMER_OFFSET) and asks what is committed (QUERY_CONSUMER_OFFSET), over the simulated
network to the node the controller (the operator) names master, through the node's real
processor (with ``offsetCommitThroughLog``: a commit is a record of the log, answered once
applied; a query answers what the in-sync slaves hold). Every answer goes to the checker:
an answer lower than an earlier one for the same queue is ``offset-regressed`` (Jepsen's
non-monotonic read), across crashes and elections.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tools.sim.invariants import Violation

if TYPE_CHECKING:
    from tools.sim.world import World

GROUP, TOPIC, QUEUES = "G", "T", 4
TIMEOUT_MS = 1000


async def offsets(world: World, consumed: dict[int, int]) -> None:
    """Every 0.25 to 1.25 s: commit a queue's consumed position, query another queue."""
    rng = world.rt_rng
    client = RemotingClient()
    try:
        while world.producing:
            await asyncio.sleep(rng.uniform(0.25, 1.25))
            # the route's master, as a client with a cached route asks (elected or not yet)
            sim = world.named_master()
            if sim is None or not world.producing:
                continue
            commit_q, query_q = rng.randrange(QUEUES), rng.randrange(QUEUES)
            fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": commit_q}
            commit = {**fields, "commitOffset": consumed[commit_q]}
            await _call(world, client, sim, RequestCode.UPDATE_CONSUMER_OFFSET, commit)
            fields["queueId"] = query_q
            resp = await _call(world, client, sim, RequestCode.QUERY_CONSUMER_OFFSET, fields)
            if resp is not None and resp.code == ResponseCode.SUCCESS:
                offset = int(resp.ext_fields["offset"])
                world.offset_answers += 1
                try:
                    world.checker.on_offset_answer(query_q, offset, sim.name, world.loop.time())
                except Violation as v:
                    world.fail(v)
    finally:
        await client.close()


async def _call(world: World, client, sim, code, fields) -> RemotingCommand | None:
    try:
        return await client.invoke(sim.addr, RemotingCommand.request(code, fields), TIMEOUT_MS)
    except Exception:  # noqa: BLE001 - a node dying under the request, a partition
        return None
