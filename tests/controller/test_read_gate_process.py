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
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.controller.support import start_controller
from tests.support.cluster import node_conf
from tests.support.waiting import wait_for
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "ReadGateTopic"
NODES = ("a", "b")
QUEUES = range(16)


def test_a_message_the_stopped_slave_has_not_acked_is_not_served(tmp_path):
    ctl_port = free_port()
    ctl = start_controller(tmp_path, "ctl", ctl_port)
    ns = start_namesrv(tmp_path)
    procs: dict[str, object] = {}
    try:
        for node in NODES:
            port, ha = free_port(), free_port()
            conf = node_conf(
                tmp_path,
                node,
                0,
                "SYNC_MASTER",
                port,
                ha,
                ns.addr,
                enableControllerMode="true",
                controllerAddr=f"127.0.0.1:{ctl_port}",
                brokerHeartbeatInterval=300,
                controllerHeartBeatTimeoutMills=3000,
                controllerLeaseMills=2000,
                syncBrokerMetadataPeriod=500,
                haSendHeartbeatInterval=200,
                allAckInSyncStateSet="true",
                minInSyncReplicas=1,
                haMaxTimeSlaveNotCatchup=60_000,
                syncFlushTimeout=20_000,
                slaveSyncIntervalMs=500,
            )
            procs[node] = start_broker(node, conf, port, tmp_path)
        asyncio.run(_scenario(f"127.0.0.1:{ctl_port}", ns.addr, procs))
    finally:
        for p in procs.values():
            if p.alive():
                p.proc.send_signal(signal.SIGCONT)
            p.kill()
        ns.kill()
        ctl.stop()


async def _scenario(ctl: str, namesrv: str, procs: dict) -> None:
    client = RemotingClient()
    producer = Producer("PG", [namesrv], retry_times=0)
    try:
        master = await wait_for(lambda: _master(client, ctl), 30_000, what="a master elected")
        await wait_for(lambda: _status(client, master, set_size=2), 30_000, what="slave in set")
        first = await producer.send(TOPIC, b"x" * 100, keys="acked")
        assert first.status is SendStatus.SEND_OK
        slave = next(n for n, p in procs.items() if p.addr != master)
        assert "acked" in await wait_for(lambda: _served(client, master), 10_000, what="read")
        s_addr = procs[slave].addr  # the slave serves what the master's frames confirmed
        await wait_for(lambda: _served(client, s_addr, want="acked"), 10_000, what="slave read")
        procs[slave].proc.send_signal(signal.SIGSTOP)
        held = asyncio.ensure_future(producer.send(TOPIC, b"y" * 100, keys="held"))
        st = await wait_for(
            lambda: _status(client, master, set_size=2, ahead=True), 10_000, what="appended"
        )
        assert st["masterMaxOffset"] > st["confirmOffset"]
        served = await _served(client, master)
        assert "held" not in served, "a record the stopped slave never acked was served"
        assert served.count("acked") == 1
        assert await _max_offsets(client, master) == 1, "GET_MAX_OFFSET counts the unacked"
        assert not held.done()
        procs[slave].proc.send_signal(signal.SIGCONT)
        assert (await held).status is SendStatus.SEND_OK
        keys = await wait_for(
            lambda: _served(client, master, want="held"), 10_000, what="served after the ack"
        )
        assert sorted(keys) == ["acked", "held"]
        assert await _max_offsets(client, master) == 2
        await wait_for(lambda: _served(client, s_addr, want="held"), 10_000, what="slave read")
    finally:
        await producer.close()
        await client.close()


async def _invoke(client: RemotingClient, addr: str, code: int, fields: dict | None = None):
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields or {}), 2000)
    except Exception:  # noqa: BLE001 - not answering yet
        return None


async def _master(client: RemotingClient, ctl: str) -> str | None:
    resp = await _invoke(
        client, ctl, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"}
    )
    return None if resp is None else resp.ext_fields.get("masterAddress") or None


async def _status(client, addr: str, set_size: int, ahead: bool = False) -> dict | None:
    """haStatus once the set has ``set_size`` members (and, ``ahead``, the log passed the
    confirmOffset)."""
    resp = await _invoke(client, addr, RequestCode.GET_BROKER_HA_STATUS)
    if resp is None or resp.code != ResponseCode.SUCCESS:
        return None
    doc = json.loads(resp.body)
    if len(doc.get("syncStateSet") or ()) != set_size or doc.get("syncStateSetProposed"):
        return None
    if ahead and doc["masterMaxOffset"] <= doc["confirmOffset"]:
        return None
    return doc


async def _served(client, addr: str, want: str | None = None) -> list[str] | None:
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
        resp = await _invoke(client, addr, RequestCode.PULL_MESSAGE, fields)
        if resp is not None and resp.code == ResponseCode.SUCCESS and resp.body:
            keys += [r.properties.get("KEYS", "") for r in decode_pull_body(resp.body, addr)]
    return keys if want is None or want in keys else None


async def _max_offsets(client, addr: str) -> int:
    """The sum of GET_MAX_OFFSET over the topic's queues."""
    total = 0
    for q in QUEUES:
        fields = {"topic": TOPIC, "queueId": q}
        resp = await _invoke(client, addr, RequestCode.GET_MAX_OFFSET, fields)
        if resp is not None and resp.code == ResponseCode.SUCCESS:
            total += int(resp.ext_fields["offset"])
    return total
