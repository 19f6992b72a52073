"""Offset commits pass the write gate, with real processes on 127.0.0.1 (issue #29): a
SYNC_MASTER group of three in controller mode with commits through the log. A slave refuses
UPDATE_CONSUMER_OFFSET (SERVICE_NOT_AVAILABLE); the master's links to the controller go silent,
and once its lease ends it refuses commits as it refuses sends, naming the lease; the new master
takes the next commit, and the old master, healed and demoted, still refuses; every
QUERY_CONSUMER_OFFSET answer the client was given (the master first, the new master after) is
at least every earlier one, and the first query after a commit's SUCCESS shows it
(read-your-writes with two in-sync slaves). The demoted old master's refusal says it is not
the master any more, not that its lease ended."""

from __future__ import annotations

import asyncio

from broker.client.producer import Producer, SendStatus
from broker.client.routes import MessageQueue
from broker.remoting.codes import RequestCode, ResponseCode
from tests.support.controller_cluster import BROKER_NAME, ControllerCluster
from tests.support.waiting import wait_for

TOPIC, GROUP = "FenceOffsets", "FenceGroup"


def test_fenced_master_and_slaves_refuse_commits_the_new_master_takes_them(tmp_path):
    asyncio.run(_run(tmp_path))


async def _commit(cluster: ControllerCluster, addr: str, offset: int):
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "commitOffset": offset}
    return await cluster.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, fields, 5000)


async def _query(cluster: ControllerCluster, addr: str) -> int | None:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0}
    resp = await cluster.invoke(addr, RequestCode.QUERY_CONSUMER_OFFSET, fields, 5000)
    return None if resp is None or resp.code != ResponseCode.SUCCESS else resp.int_field("offset")


async def _run(tmp_path) -> None:
    cluster = await ControllerCluster.start(tmp_path, syncFlushTimeout=1000)
    producer = Producer("PG", [cluster.ns.addr], retry_times=2)
    answers: list[int] = []  # every QUERY_CONSUMER_OFFSET answer, in the order given
    try:
        first, epoch = await cluster.wait_master()
        await cluster.wait_in_sync(first, 2)
        mq = MessageQueue(TOPIC, BROKER_NAME, 0)
        for i in range(20):
            res = await producer._send_once(first, mq, f"m{i}".encode(), {"UNIQ_KEY": f"m{i}"}, 0)
            assert res.status is SendStatus.SEND_OK
        resp = await _commit(cluster, first, 5)
        assert resp is not None and resp.code == ResponseCode.SUCCESS, resp
        # read-your-writes: the master answers a commit once its record is visible (every
        # in-sync slave holds it), so the next query shows it
        answers.append(await _query(cluster, first))
        assert answers[-1] == 5, answers
        for node in cluster.nodes.values():
            if node.addr != first:
                resp = await _commit(cluster, node.addr, 9)
                assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE, (node.name, resp)
                assert "slave" in resp.remark

        old = cluster.node_at(first)
        for proxy in old.to_controllers:
            proxy.blackhole(True)

        async def refused() -> str | None:
            resp = await _commit(cluster, first, 7)
            if resp is not None and resp.code == ResponseCode.SERVICE_NOT_AVAILABLE:
                return resp.remark
            return None

        why = await wait_for(refused, 15_000, what="the fenced master refusing commits")
        assert "lease" in why, why
        second, _ = await cluster.wait_master(epoch, 30_000)
        assert second != first

        async def taken() -> bool:
            resp = await _commit(cluster, second, 12)
            return resp is not None and resp.code == ResponseCode.SUCCESS

        await wait_for(taken, 15_000, what="the new master taking the commit")
        answers.append(await _query(cluster, second))
        for proxy in old.to_controllers:  # heal: the old master follows the new one
            proxy.blackhole(False)
            proxy.drop()
        answers.append(await _query(cluster, second))

        async def demoted() -> bool:
            doc = await cluster.status(first)
            return doc is not None and doc["brokerRole"] == "SLAVE"

        await wait_for(demoted, 30_000, what="the old master following the new one")

        async def says_demoted() -> str | None:  # its gate closed, the words what is true now
            resp = await _commit(cluster, first, 14)
            assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE, resp
            return resp.remark if "not the master any more" in resp.remark else None

        why = await wait_for(says_demoted, 10_000, what="the demoted master's refusal")
        assert "lease of" not in why, why
        answers.append(await _query(cluster, second))
        assert None not in answers and answers == sorted(answers), answers
        assert answers[-1] == 12, answers
    finally:
        await producer.close()
        await cluster.close()
