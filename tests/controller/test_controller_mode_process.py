"""Controller mode with real processes on 127.0.0.1: a controller and three SYNC_MASTER nodes
with ``enableControllerMode=true``; the controller elects a master, acknowledged sends, kill -9
the master, the controller elects another by itself (no ``admin promote``), every acknowledged
message is on it and sends succeed again."""

from __future__ import annotations

import asyncio
import json

from broker.client.producer import Producer, SendStatus
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.support.controller_cluster import ControllerCluster
from tests.support.waiting import wait_for

TOPIC = "ControllerModeTopic"


async def _send_one(producer: Producer, label: str):
    body = f"{label}-".encode() * 20
    try:
        res = await producer.send(TOPIC, body, keys=label)
    except Exception:  # noqa: BLE001 - refused or the master died: not acknowledged
        return None
    return (res, body) if res.status is SendStatus.SEND_OK else None


def test_kill_the_master_and_the_controller_elects_another(tmp_path):
    asyncio.run(_scenario(tmp_path))


async def _scenario(tmp_path) -> None:
    cluster = await ControllerCluster.start(tmp_path)
    producer = Producer("PG", [cluster.ns.addr], retry_times=2)
    try:
        first, epoch = await cluster.wait_master()
        await cluster.wait_in_sync(first, 2)
        await _forged_notify_changes_nothing(cluster, first)
        acked = []
        for i in range(100):
            sent = await _send_one(producer, f"before-{i}")
            if sent is not None:
                acked.append(sent)
        assert len(acked) == 100, "a SYNC_MASTER with live slaves acknowledges every send"
        cluster.kill(cluster.node_at(first).name)  # -9
        second, epoch2 = await cluster.wait_master(epoch)
        assert second != first and epoch2 > epoch
        after = await wait_for(
            lambda: _send_one(producer, "after"), 60_000, what="a send acknowledged again"
        )
        assert after[0].status is SendStatus.SEND_OK
        for res, body in acked:
            rec = await cluster.pull(second, TOPIC, res.queue.queue_id, res.queue_offset)
            assert rec.body == body
    finally:
        await producer.close()
        await cluster.close()


async def _forged_notify_changes_nothing(cluster: ControllerCluster, master: str) -> None:
    """1008 from anyone but through the controller: a hint, never a role change."""
    slave = next(n.addr for n in cluster.nodes.values() if n.addr != master)
    req = RemotingCommand.request(
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
        {"masterAddress": slave, "masterEpoch": 99, "brokerRole": "SYNC_MASTER", "brokerId": 0},
    )
    resp = await cluster.client.invoke(slave, req, 5000)
    assert resp.code == ResponseCode.SUCCESS
    status = RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS)
    doc = json.loads((await cluster.client.invoke(slave, status, 5000)).body)
    assert doc["brokerRole"] == "SLAVE" and doc["epoch"] < 99
    assert (await cluster.replica_info())[0] == master
