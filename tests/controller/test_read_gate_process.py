"""Consumers read only what every in-sync slave acknowledged, with real processes on 127.0.0.1:
a controller and two nodes in controller mode with ``allAckInSyncStateSet=true``. With the
slave SIGSTOPped a message reaches the master's log but no pull returns it and GET_MAX_OFFSET
does not count it; after SIGCONT the slave acks and the message is served, by the master and by
the slave (which learns the confirmOffset from the HA frames)."""

from __future__ import annotations

import asyncio
import json
import signal

from broker.client.consumer import decode_pull_body
from broker.client.producer import Producer, SendStatus
from broker.remoting.codes import RequestCode, ResponseCode
from tests.support.controller_cluster import ControllerCluster
from tests.support.waiting import wait_for

TOPIC = "ReadGateTopic"
QUEUES = range(16)


def test_a_message_the_stopped_slave_has_not_acked_is_not_served(tmp_path):
    asyncio.run(_scenario(tmp_path))


async def _scenario(tmp_path) -> None:
    cluster = await ControllerCluster.start(
        tmp_path,
        nodes=("a", "b"),
        flushDiskType="ASYNC_FLUSH",
        haSendHeartbeatInterval=200,
        allAckInSyncStateSet="true",
        minInSyncReplicas=1,
        haMaxTimeSlaveNotCatchup=60_000,
        syncFlushTimeout=20_000,
        slaveSyncIntervalMs=500,
    )
    producer = Producer("PG", [cluster.ns.addr], retry_times=0)
    try:
        master, _ = await cluster.wait_master(timeout_ms=30_000)
        await wait_for(lambda: _status(cluster, master, set_size=2), 30_000, what="slave in set")
        first = await producer.send(TOPIC, b"x" * 100, keys="acked")
        assert first.status is SendStatus.SEND_OK
        slave = next(n for n in cluster.nodes.values() if n.addr != master)
        assert "acked" in await wait_for(lambda: _served(cluster, master), 10_000, what="read")
        s_addr = slave.addr  # the slave serves what the master's frames confirmed
        await wait_for(lambda: _served(cluster, s_addr, want="acked"), 10_000, what="slave read")
        slave.proc.proc.send_signal(signal.SIGSTOP)
        held = asyncio.ensure_future(producer.send(TOPIC, b"y" * 100, keys="held"))
        st = await wait_for(
            lambda: _status(cluster, master, set_size=2, ahead=True), 10_000, what="appended"
        )
        assert st["masterMaxOffset"] > st["confirmOffset"]
        served = await _served(cluster, master)
        assert "held" not in served, "a record the stopped slave never acked was served"
        assert served.count("acked") == 1
        assert await _max_offsets(cluster, master) == 1, "GET_MAX_OFFSET counts the unacked"
        assert not held.done()
        slave.proc.proc.send_signal(signal.SIGCONT)
        assert (await held).status is SendStatus.SEND_OK
        keys = await wait_for(
            lambda: _served(cluster, master, want="held"), 10_000, what="served after the ack"
        )
        assert sorted(keys) == ["acked", "held"]
        assert await _max_offsets(cluster, master) == 2
        await wait_for(lambda: _served(cluster, s_addr, want="held"), 10_000, what="slave read")
    finally:
        await producer.close()
        await cluster.close()


async def _status(
    cluster: ControllerCluster, addr: str, set_size: int, ahead: bool = False
) -> dict | None:
    """haStatus once the set has ``set_size`` members (and, ``ahead``, the log passed the
    confirmOffset)."""
    resp = await cluster.invoke(addr, RequestCode.GET_BROKER_HA_STATUS)
    if resp is None or resp.code != ResponseCode.SUCCESS:
        return None
    doc = json.loads(resp.body)
    if len(doc.get("syncStateSet") or ()) != set_size or doc.get("syncStateSetProposed"):
        return None
    if ahead and doc["masterMaxOffset"] <= doc["confirmOffset"]:
        return None
    return doc


async def _served(
    cluster: ControllerCluster, addr: str, want: str | None = None
) -> list[str] | None:
    """The keys a pull of every queue from offset 0 returns (None until ``want`` is among)."""
    keys: list[str] = []
    for q in QUEUES:
        fields = {
            "consumerGroup": "CG",
            "topic": TOPIC,
            "queueId": q,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 0,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
        }
        resp = await cluster.invoke(addr, RequestCode.PULL_MESSAGE, fields)
        if resp is not None and resp.code == ResponseCode.SUCCESS and resp.body:
            keys += [r.properties.get("KEYS", "") for r in decode_pull_body(resp.body, addr)]
    return keys if want is None or want in keys else None


async def _max_offsets(cluster: ControllerCluster, addr: str) -> int:
    """The sum of GET_MAX_OFFSET over the topic's queues."""
    total = 0
    for q in QUEUES:
        fields = {"topic": TOPIC, "queueId": q}
        resp = await cluster.invoke(addr, RequestCode.GET_MAX_OFFSET, fields)
        if resp is not None and resp.code == ResponseCode.SUCCESS:
            total += int(resp.ext_fields["offset"])
    return total
