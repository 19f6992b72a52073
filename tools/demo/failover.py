"""The demo's failover, in controller mode: the consumer group commits, the master is killed
(-9) right after, the controller elects the slave by itself (no ``admin promote``: that stays
for groups without a controller), the new master still answers the commit made just before the
kill (QUERY_CONSUMER_OFFSET, issue #29), traffic goes on, and the old master rejoins as its
slave."""

from __future__ import annotations

import asyncio
import time

from tools.demo.base import (
    CONSUMER_GROUP,
    GROUP,
    MASTER,
    SLAVE,
    TOPIC,
    Demo,
    DemoError,
    has_module,
)
from tools.demo.cluster import node_at, start_node, wait_elected, wait_slave
from tools.demo.traffic import consume, produce, wait_snapshot_offsets


async def query_offsets(addr: str, queues: list[int]) -> dict[int, int]:
    """QUERY_CONSUMER_OFFSET of the demo's group on ``addr``, queue by queue (-1: none)."""
    from broker.remoting.client import RemotingClient
    from broker.remoting.codes import RequestCode, ResponseCode
    from broker.remoting.command import RemotingCommand

    client = RemotingClient()
    out = {}
    try:
        for q in queues:
            req = RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": CONSUMER_GROUP, "topic": TOPIC, "queueId": q},
            )
            resp = await client.invoke(addr, req, 5000)
            out[q] = resp.int_field("offset") if resp.code == ResponseCode.SUCCESS else -1
    finally:
        await client.close()
    return out


def check_commit_survived(d: Demo, addr: str, committed: dict[int, int]) -> None:
    """The new master answers at least what was committed before the kill, on every queue."""
    answered = asyncio.run(query_offsets(addr, sorted(committed)))
    behind = {q: (c, answered[q]) for q, c in committed.items() if answered[q] < c}
    d.say(
        f"  {node_at(d, addr)} answers QUERY_CONSUMER_OFFSET with the commit made just before "
        f"the kill: committed {sum(committed.values())}, answered "
        f"{sum(max(a, 0) for a in answered.values())} over {len(committed)} queue(s)"
    )
    if behind:
        raise DemoError(
            "the new master answers less than was committed before the failover "
            f"(queue: (committed, answered)) {behind}"
        )


def failover(d: Demo) -> None:
    d.step("failover right after a commit: kill -9 the master, the controller elects")
    if not has_module("broker.ha.failover"):
        d.skip("failover", "promotion is not built yet (issue #4)")
        return
    got, committed = asyncio.run(consume(d, d.args.messages, until_idle=True))
    d.procs[MASTER].kill()
    t_kill = time.monotonic()
    d.say(
        f"  consumer group {CONSUMER_GROUP} consumed the {got} left and committed "
        f"{sum(committed.values())}; {MASTER} killed (-9) right after the commit"
    )
    addr, epoch = wait_elected(d, 1)
    d.say(
        f"  the controller elected {node_at(d, addr)} in {time.monotonic() - t_kill:.2f} s "
        f"(no manual step): {node_at(d, addr)} is master of {GROUP} under epoch {epoch}"
    )
    if addr != d.procs[SLAVE].addr:
        raise DemoError(f"the controller elected {addr}, not the surviving {SLAVE}")
    check_commit_survived(d, addr, committed)
    start_node(d, MASTER)
    d.say(
        f"  {MASTER} restarted: the controller makes it a slave of {SLAVE} (it truncates "
        "what it alone had)"
    )
    wait_slave(d, d.procs[SLAVE].addr)
    d.roles = {MASTER: (1, "SLAVE", epoch), SLAVE: (0, "SYNC_MASTER", epoch)}
    asyncio.run(produce(d, d.args.messages // 2, "after-failover"))
    got, committed = asyncio.run(consume(d, d.args.messages // 2))
    d.say(
        f"  consumer group {CONSUMER_GROUP} consumed {got} from the new master and "
        f"committed {sum(committed.values())} (before the failover: "
        f"{sum(d.committed.values())})"
    )
    wait_snapshot_offsets(d, SLAVE, committed)
