"""The controller leader killed under broker load, with real processes on 127.0.0.1 (issue #30):
three controllers on PySyncObj's Raft, a SYNC_MASTER group of three in controller mode and a
producer sending all along. kill -9 the Raft leader: another controller leads with the same
state (master, epochs, SyncStateSet), the brokers heartbeat to it (it sees all three alive past
their heartbeat timeout), the master keeps its role and its lease; then kill -9 the master: the
new controller leader elects a member of the SyncStateSet, and no acknowledged message is
lost."""

from __future__ import annotations

import asyncio
import json

from broker.client.producer import Producer, SendStatus
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.support.controller_cluster import BROKER_NAME, BROKER_TIMING, ControllerCluster
from tests.support.waiting import wait_for

TOPIC = "RaftLoadTopic"


class Load:
    """A producer sending one message after another until stopped; the acknowledged ones kept."""

    def __init__(self, namesrv: str) -> None:
        self.producer = Producer("PG", [namesrv], retry_times=2)
        self.acked: list = []
        self.failed = 0
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            body = f"load-{n}-".encode() * 10
            n += 1
            try:
                res = await self.producer.send(TOPIC, body, keys=f"load-{n}")
            except Exception:  # noqa: BLE001 - refused or the master died: not acknowledged
                self.failed += 1
                continue
            if res.status is SendStatus.SEND_OK:
                self.acked.append((res, body))

    async def more_than(self, n: int, timeout_ms: int = 30_000) -> None:
        await wait_for(lambda: len(self.acked) > n, timeout_ms, what=f"more than {n} acked")

    async def stop(self) -> None:
        self._stop.set()
        await self._task
        await self.producer.close()


def test_controller_leader_killed_under_load(tmp_path):
    asyncio.run(_leader_kill(tmp_path))


async def _sync_state(cluster: ControllerCluster, ctl: str) -> dict | None:
    req = RemotingCommand.request(
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, json.dumps([BROKER_NAME]).encode()
    )
    try:
        resp = await cluster.client.invoke(ctl, req, 2000)
    except Exception:  # noqa: BLE001 - not answering
        return None
    if resp.code != ResponseCode.SUCCESS:
        return None
    return json.loads(resp.body)["replicasInfoTable"][BROKER_NAME]


def _without_liveness(doc: dict) -> dict:
    strip = ("inSyncReplicas", "notInSyncReplicas")
    rows = {k: [{**r, "alive": None} for r in doc[k]] for k in strip}
    return {**doc, **rows}


async def _leader_kill(tmp_path) -> None:
    cluster = await ControllerCluster.start(tmp_path, controllers=3)
    load = None
    try:
        first, epoch = await cluster.wait_master()
        await cluster.wait_in_sync(first, 2)
        leader = await cluster.controller_leader()
        await wait_for(
            lambda: _all_in_sync_state_set(cluster, leader), 30_000, what="a SyncStateSet of 3"
        )
        load = Load(cluster.ns.addr)
        await load.more_than(20)
        before = await _sync_state(cluster, leader)
        cluster.controllers[cluster.ctl_addrs.index(leader)].kill()
        rest = [a for a in cluster.ctl_addrs if a != leader]
        new_leader = await wait_for(
            lambda: cluster.controller_leader(rest), 30_000, what="a new controller leader"
        )
        after = await wait_for(
            lambda: _sync_state(cluster, new_leader), 30_000, what="the new leader answering"
        )
        assert _without_liveness(after) == _without_liveness(before)
        acked_at_kill = len(load.acked)
        # the brokers heartbeat to the new leader: alive there past their heartbeat timeout
        timeout_ms = BROKER_TIMING["controllerHeartBeatTimeoutMills"]
        await load.more_than(acked_at_kill + 20)
        await asyncio.sleep(timeout_ms / 1000)  # a span to outlive, not a synchronisation
        await wait_for(lambda: _all_alive(cluster, new_leader), 10_000, what="3 alive brokers")
        assert (await cluster.replica_info(new_leader))[:2] == (first, epoch)
        master_doc = await cluster.status(first)
        assert master_doc["brokerRole"] != "SLAVE" and master_doc["epoch"] == epoch
        assert len(load.acked) > acked_at_kill + 20, "the master stopped taking writes"

        cluster.kill(cluster.node_at(first).name)
        second, epoch2 = await cluster.wait_master(epoch, 30_000)
        assert second != first and epoch2 == epoch + 1
        assert any(r["brokerAddress"] == second for r in before["inSyncReplicas"])
        acked_at_master_kill = len(load.acked)
        await load.more_than(acked_at_master_kill + 20)
        await load.stop()
        for res, body in load.acked:
            rec = await cluster.pull(second, TOPIC, res.queue.queue_id, res.queue_offset)
            assert rec.body == body, (res.queue, res.queue_offset)
    finally:
        if load is not None and not load._task.done():
            await load.stop()
        await cluster.close()


async def _all_alive(cluster: ControllerCluster, ctl: str) -> bool:
    doc = await _sync_state(cluster, ctl)
    return doc is not None and [r["alive"] for r in doc["inSyncReplicas"]] == [True] * 3


async def _all_in_sync_state_set(cluster: ControllerCluster, ctl: str) -> bool:
    doc = await _sync_state(cluster, ctl)
    return doc is not None and len(doc["inSyncReplicas"]) == 3
