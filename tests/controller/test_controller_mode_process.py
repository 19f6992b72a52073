"""Controller mode with real processes on 127.0.0.1: a controller and three SYNC_MASTER nodes
with ``enableControllerMode=true``; the controller elects a master, acknowledged sends, kill -9
the master, the controller elects another by itself (no ``admin promote``), every acknowledged
message is on it and sends succeed again."""

from __future__ import annotations

import asyncio
import json

from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.reader import decode_record
from tests.controller.support import start_controller
from tests.support.cluster import node_conf
from tests.support.waiting import wait_for
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "ControllerModeTopic"
NODES = ("a", "b", "c")


async def _master(client: RemotingClient, ctl: str) -> tuple[str | None, int]:
    req = RemotingCommand.request(
        RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"}
    )
    try:
        resp = await client.invoke(ctl, req, 2000)
    except Exception:  # noqa: BLE001 - not answering yet
        return None, 0
    h = resp.ext_fields
    return h.get("masterAddress") or None, int(h.get("masterEpoch") or 0)


async def _ha_slaves(client: RemotingClient, addr: str) -> int:
    req = RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS)
    try:
        resp = await client.invoke(addr, req, 2000)
    except Exception:  # noqa: BLE001
        return 0
    doc = json.loads(resp.body) if resp.code == ResponseCode.SUCCESS else {}
    return sum(1 for s in doc.get("slaves", []) if s.get("inSync"))


async def _send_one(producer: Producer, label: str):
    body = f"{label}-".encode() * 20
    try:
        res = await producer.send(TOPIC, body, keys=label)
    except Exception:  # noqa: BLE001 - refused or the master died: not acknowledged
        return None
    return (res, body) if res.status is SendStatus.SEND_OK else None


async def _pull(client: RemotingClient, addr: str, queue_id: int, offset: int):
    req = RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "check",
            "topic": TOPIC,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": 1,
            "sysFlag": 0,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
        },
    )
    resp = await client.invoke(addr, req, 5000)
    assert resp.code == ResponseCode.SUCCESS, (addr, queue_id, offset, resp.code, resp.remark)
    return decode_record(resp.body, 0)


def test_kill_the_master_and_the_controller_elects_another(tmp_path):
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
                flushDiskType="SYNC_FLUSH",
                enableControllerMode="true",
                controllerAddr=f"127.0.0.1:{ctl_port}",
                brokerHeartbeatInterval=300,
                controllerHeartBeatTimeoutMills=3000,
                controllerLeaseMills=2000,
                syncBrokerMetadataPeriod=500,
                haSendHeartbeatInterval=300,
                slaveSyncIntervalMs=300,
            )
            procs[node] = start_broker(node, conf, port, tmp_path)
        asyncio.run(_scenario(f"127.0.0.1:{ctl_port}", ns.addr, procs))
    finally:
        for p in procs.values():
            p.kill()
        ns.kill()
        ctl.stop()


async def _scenario(ctl: str, namesrv: str, procs: dict) -> None:
    client = RemotingClient()
    producer = Producer("PG", [namesrv], retry_times=2)
    try:
        first, epoch = await wait_for(
            lambda: _elected(client, ctl, 0), 60_000, what="a first master elected", every_ms=100
        )
        await wait_for(
            lambda: _count_at_least(_ha_slaves(client, first), 2),
            60_000,
            what="both slaves in sync",
        )
        await _forged_notify_changes_nothing(client, ctl, first, procs)
        acked = []
        for i in range(100):
            sent = await _send_one(producer, f"before-{i}")
            if sent is not None:
                acked.append(sent)
        assert len(acked) == 100, "a SYNC_MASTER with live slaves acknowledges every send"
        victim = next(n for n, p in procs.items() if p.addr == first)
        procs[victim].kill()  # -9
        second, epoch2 = await wait_for(
            lambda: _elected(client, ctl, epoch), 60_000, what="a new master", every_ms=100
        )
        assert second != first and epoch2 > epoch
        after = await wait_for(
            lambda: _send_one(producer, "after"), 60_000, what="a send acknowledged again"
        )
        assert after[0].status is SendStatus.SEND_OK
        for res, body in acked:
            rec = await _pull(client, second, res.queue.queue_id, res.queue_offset)
            assert rec.body == body
    finally:
        await producer.close()
        await client.close()


async def _elected(client: RemotingClient, ctl: str, after_epoch: int):
    addr, epoch = await _master(client, ctl)
    return (addr, epoch) if addr and epoch > after_epoch else None


async def _count_at_least(coro, n: int) -> bool:
    return (await coro) >= n


async def _forged_notify_changes_nothing(client, ctl: str, master: str, procs: dict) -> None:
    """1008 from anyone but through the controller: a hint, never a role change."""
    slave = next(p.addr for p in procs.values() if p.addr != master)
    req = RemotingCommand.request(
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
        {"masterAddress": slave, "masterEpoch": 99, "brokerRole": "SYNC_MASTER", "brokerId": 0},
    )
    resp = await client.invoke(slave, req, 5000)
    assert resp.code == ResponseCode.SUCCESS
    status = RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS)
    doc = json.loads((await client.invoke(slave, status, 5000)).body)
    assert doc["brokerRole"] == "SLAVE" and doc["epoch"] < 99
    assert (await _master(client, ctl))[0] == master
