"""With the master down, consumers go on consuming from the slave (real processes): the name
server drops the dead master at once (its registration connection closed), the consumer reads
and commits on the slave, and the restarted master takes the larger offsets back. That is
RocketMQ's way, so the nodes run with ``offsetCommitThroughLog=false``: with commits through the
log a slave refuses them and the consumer keeps its offsets until a master takes them
(tests/node/test_offset_commit_gate.py)."""

from __future__ import annotations

import asyncio
import functools

from broker.admin import ha_status
from broker.client.consumer import Consumer
from broker.client.producer import Producer, SendStatus
from broker.client.routes import fetch_route
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from tests.conftest import wait_until
from tests.ha.test_failover_process import _conf as _failover_conf
from tests.support.cluster import knows_topic
from tests.support.waiting import wait_for
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "FailoverTopic"  # the name _conf's brokers expect nothing of; any topic works
N = 400
_conf = functools.partial(_failover_conf, offsetCommitThroughLog="false")


# A shared machine: generous deadlines.
_wait = functools.partial(wait_until, timeout_s=60.0)


async def _committed(addr: str) -> int:
    client = RemotingClient()
    total = 0
    try:
        for qid in range(4):
            req = RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": "CG", "topic": TOPIC, "queueId": qid},
            )
            resp = await client.invoke(addr, req, 5000)
            total += max(0, int(resp.ext_fields.get("offset", 0)))
    finally:
        await client.close()
    return total


def test_consumers_go_on_from_the_slave_while_the_master_is_down(tmp_path):
    ns = start_namesrv(tmp_path)
    procs = [ns]
    try:
        (a_port, a_ha), (b_port, b_ha) = (free_port(), free_port()), (free_port(), free_port())
        a_conf = _conf(tmp_path, "a", 0, "SYNC_MASTER", a_port, a_ha, ns.addr)
        a = start_broker("a", a_conf, a_port, tmp_path)
        b = start_broker(
            "b",
            _conf(
                tmp_path,
                "b",
                1,
                "SLAVE",
                b_port,
                b_ha,
                ns.addr,
                haMasterAddress=f"127.0.0.1:{a_ha}",
            ),
            b_port,
            tmp_path,
        )
        procs += [a, b]
        _wait(lambda: asyncio.run(ha_status([a.addr]))[0].get("slaves"), what="b connected")

        async def produce():
            p = Producer("PG", [ns.addr])
            try:
                for i in range(N):
                    res = await p.send(TOPIC, b"m%04d" % i)
                    assert res.status is SendStatus.SEND_OK
            finally:
                await p.close()

        asyncio.run(produce())
        consumer_box = {}

        async def consume(want: int, deadline_s: float = 60.0) -> set[bytes]:
            c = consumer_box.get("c")
            if c is None:
                c = consumer_box["c"] = Consumer("CG", [ns.addr], TOPIC, persist_interval_ms=0)
            got: set[bytes] = set()

            async def consumed() -> bool:
                nonlocal got
                try:
                    got |= {r.body for r in await c.poll()}
                except Exception:  # noqa: BLE001 - a dead master mid-poll; the next poll moves on
                    await asyncio.sleep(0.05)
                return len(got) >= want

            await wait_for(
                consumed, deadline_s * 1000, what=f"{want} messages consumed", every_ms=0
            )
            await c.persist()
            return got

        loop = asyncio.new_event_loop()
        try:
            first = loop.run_until_complete(consume(N // 2))
            # the slave serves a topic once SlaveSynchronize copied its config (every 300 ms
            # here; the messages are there already, SYNC_MASTER). On a loaded machine the kill
            # came first once, and the slave rightly answered TOPIC_NOT_EXIST (as RocketMQ's)
            _wait(lambda: knows_topic(b.addr, TOPIC), what="the slave has the topic")
            a.kill()  # the master is gone; the slave holds everything

            async def master_gone():
                client = RemotingClient()
                try:
                    route = await fetch_route(client, [ns.addr], TOPIC)
                    return route.master_addr("broker-a") is None
                finally:
                    await client.close()

            _wait(lambda: asyncio.run(master_gone()), what="name server drops the dead master")
            rest = loop.run_until_complete(consume(N - len(first)))
            loop.run_until_complete(consumer_box["c"].close())
        finally:
            loop.close()
        assert first | rest == {b"m%04d" % i for i in range(N)}
        # The commits went to the slave, the only node up.
        assert asyncio.run(_committed(b.addr)) == N

        # The master returns: it takes the slave's larger offsets before it serves.
        a2 = start_broker("a", a_conf, a_port, tmp_path)
        procs.append(a2)
        assert asyncio.run(_committed(a2.addr)) == N
    finally:
        for p in procs:
            p.kill()
