"""Offset commits pass the write gate the send path passes (broker/write_gate.py): a master
whose gate is closed (lease ended, no role yet) answers UPDATE_CONSUMER_OFFSET as a send,
SERVICE_NOT_AVAILABLE with the gate's reason, and drops the commit a pull carries, appending
no commit record; under offsetCommitThroughLog a slave refuses commits too, while with the log
off it takes them into its table as RocketMQ's slave does. Opened again, the same commit is
taken."""

from __future__ import annotations

import pytest

from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.offset_commits.model import OFFSETS_TOPIC
from tests.node.test_processors import pull, send_v2
from tests.support.nodes import run_node
from tests.support.waiting import wait_for


def commit(topic: str, qid: int, offset: int, group: str = "CG") -> RemotingCommand:
    fields = {"consumerGroup": group, "topic": topic, "queueId": qid, "commitOffset": offset}
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, fields)


def _records(node) -> int:
    return len(node.store.get_message(OFFSETS_TOPIC, 0, 0, 100).records)


@pytest.mark.parametrize("through_log", [True, False])
def test_a_fenced_master_refuses_commits_as_it_refuses_sends(tmp_path, through_log):
    async def body(node, client, addr):
        for i in range(4):
            assert (await client.invoke(addr, send_v2("T", str(i).encode()))).code == 0
        node.gate.close("lease", "lease ended at 123: no contact with the controller")
        sent = await client.invoke(addr, send_v2("T", b"late"))
        r = await client.invoke(addr, commit("T", 0, 3))
        assert (r.code, r.remark) == (sent.code, sent.remark)
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "lease ended" in r.remark
        p = await client.invoke(addr, pull("T", 0, 0, sys_flag=0x1 | 0x4, commit=2))
        assert p.code == ResponseCode.SUCCESS  # the pull is served; its commit is dropped
        assert node.store.consumer_offsets.query("CG", "T", 0) == -1
        assert _records(node) == 0
        node.gate.open("lease")
        r = await client.invoke(addr, commit("T", 0, 3))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert node.store.consumer_offsets.query("CG", "T", 0) == 3
        assert _records(node) == (1 if through_log else 0)

    run_node(tmp_path, body, offsetCommitThroughLog=str(through_log).lower())


@pytest.mark.parametrize("through_log", [True, False])
def test_a_slave_refuses_commits_only_through_the_log(tmp_path, through_log):
    async def body(node, client, addr):
        node.store.topic_config.put("T", {"topicName": "T", "writeQueueNums": 1, "perm": 6})
        r = await client.invoke(addr, commit("T", 0, 0))
        p = await client.invoke(addr, pull("T", 0, 0, sys_flag=0x1 | 0x4, commit=0))
        assert p.code != ResponseCode.SERVICE_NOT_AVAILABLE  # pulls are served either way
        if through_log:
            assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in r.remark
            assert node.store.consumer_offsets.query("CG", "T", 0) == -1
        else:  # RocketMQ: ConsumerManageProcessor has no role check
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert node.store.consumer_offsets.query("CG", "T", 0) == 0
        assert _records(node) == 0

    run_node(
        tmp_path,
        body,
        brokerRole="SLAVE",
        brokerId=1,
        offsetCommitThroughLog=str(through_log).lower(),
    )


def test_a_pull_commit_dropped_while_closed_is_not_taken_later(tmp_path):
    """The closed gate's pull commits 3; the open gate's commits 2: the table holds 2 (had the
    first been taken, forward-only commits would keep 3)."""

    async def body(node, client, addr):
        for i in range(4):
            assert (await client.invoke(addr, send_v2("T", str(i).encode()))).code == 0
        node.gate.close("unassigned", "no role from the controller yet")
        await client.invoke(addr, pull("T", 0, 0, sys_flag=0x1 | 0x4, commit=3))
        node.gate.open("unassigned")
        await client.invoke(addr, pull("T", 0, 2, sys_flag=0x1 | 0x4, commit=2))
        await wait_for(
            lambda: node.store.consumer_offsets.query("CG", "T", 0) >= 0,
            20_000,
            what="the open gate's pull commit to reach the table",
            every_ms=5,
        )
        assert node.store.consumer_offsets.query("CG", "T", 0) == 2
        assert _records(node) == 1

    run_node(tmp_path, body)
