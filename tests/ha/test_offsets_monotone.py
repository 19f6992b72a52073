"""Committed offsets never go backwards (RocketMQ issue #1094) except an explicit admin reset.

Unit tests with fakes for the forward-only merge and the reverse (pre-online) sync; a process
test: consumers commit on the slave while the master is down, the master restarts with its older
``consumerOffset.json``, and no committed offset goes backwards on either node. That is RocketMQ's
way (``offsetCommitThroughLog=false``): with commits through the log a slave refuses them
(tests/node/test_offset_commit_gate.py) and the master's log holds every one.
"""

from __future__ import annotations

import asyncio
import functools
from types import SimpleNamespace

import pytest

from broker.client.producer import Producer, SendStatus
from broker.config import BrokerRole
from broker.ha.offset_sync import OffsetPreOnline, merge_consumer_offsets
from broker.node_parts import PeerLinks
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.consumer_offsets import Commit, ConsumerOffsetManager
from broker.store.delay_offsets import DelayOffsetTable
from broker.store.role import BrokerRoleState
from contracts.errors import RemotingError
from tests.conftest import wait_until
from tests.support.aio import async_test
from tests.support.cluster import conf_factory
from tests.support.waiting import wait_for
from tools.localcluster import free_port, start_broker, start_namesrv

# -- units -----------------------------------------------------------------------------------


def test_commit_keeps_the_max_and_reset_rewinds(tmp_path):
    t = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    assert t.commit("G", "T", 0, 10) is Commit.STORED
    assert t.commit("G", "T", 0, 7) is Commit.KEPT_LARGER
    assert t.query("G", "T", 0) == 10
    assert t.reset("G", "T", 0, 3) == 10
    assert t.query("G", "T", 0) == 3
    assert t.commit("G", "T", 0, 4) is Commit.STORED and t.query("G", "T", 0) == 4


def test_merge_raises_only_smaller_offsets(tmp_path):
    t = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    t.commit("G", "T", 0, 50)
    t.commit("G", "T", 1, 5)
    doc = {"offsetTable": {"T@G": {"0": 40, "1": 9, "2": 1}, "U@H": {"0": 0}}}
    raised = merge_consumer_offsets(t, doc)
    assert sorted(raised) == [("G", "T", 1, 5, 9), ("G", "T", 2, -1, 1), ("H", "U", 0, -1, 0)]
    assert t.query("G", "T", 0) == 50  # the peer's 40 does not move it back
    assert t.query("G", "T", 1) == 9


@pytest.mark.parametrize(
    "doc, words",
    [
        ({"offsetTable": []}, "not an object"),
        ({"offsetTable": {"nogroup": {"0": 1}}}, "'nogroup'"),
        ({"offsetTable": {"T@G": {"0": "x"}}}, "'T@G'"),
    ],
)
def test_merge_names_malformed_entries(tmp_path, doc, words):
    t = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    with pytest.raises(ValueError, match=words):
        merge_consumer_offsets(t, doc)


def test_delay_merge_keeps_the_max(tmp_path):
    delays = DelayOffsetTable(str(tmp_path / "delayOffset.json"))
    delays.advance(1, 10)
    delays.advance(2, 3)
    assert delays.merge_forward({"offsetTable": {"1": 4, "2": 8, "3": 1}}) == 2
    table = delays.table
    assert table == {1: 10, 2: 8, 3: 1}


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"offsetTable": {"x": 1}}, "'x'"),
        ({"offsetTable": {"1": -5}}, "negative"),
        ({"offsetTable": [1]}, "not an object"),
    ],
)
def test_delay_merge_names_malformed_entries_and_changes_nothing(tmp_path, doc, words):
    delays = DelayOffsetTable(str(tmp_path / "delayOffset.json"))
    delays.advance(1, 10)
    with pytest.raises(ValueError, match=words):
        delays.merge_forward(doc)
    assert delays.table == {1: 10}


def _fake_node(tmp_path, role=BrokerRole.SYNC_MASTER):
    store = SimpleNamespace(
        consumer_offsets=ConsumerOffsetManager(str(tmp_path / "consumerOffset.json")),
        delay_offsets=DelayOffsetTable(str(tmp_path / "delayOffset.json")),
    )
    config = SimpleNamespace(broker_name="broker-a", broker_addr="127.0.0.1:1")
    return SimpleNamespace(store=store, config=config, role=BrokerRoleState(role, 0))


def _pre_online(node, **fakes) -> OffsetPreOnline:
    return OffsetPreOnline(node.store, node.config, node.role, PeerLinks(), **fakes)


def test_pre_online_sync_takes_the_larger_offsets_and_skips_dead_peers(tmp_path):
    node = _fake_node(tmp_path)
    node.store.consumer_offsets.commit("G", "T", 0, 100)
    node.store.consumer_offsets.commit("G", "T", 1, 20)
    docs = {
        ("s1", RequestCode.GET_ALL_CONSUMER_OFFSET): {"offsetTable": {"T@G": {"0": 90, "1": 35}}},
        ("s1", RequestCode.GET_ALL_DELAY_OFFSET): {"offsetTable": {"3": 7}},
    }

    async def fetch(addr, code):
        if addr == "dead":
            raise RemotingError("connection refused")
        return docs[(addr, code)]

    async def peers():
        return ["dead", "s1"]

    async def main():
        svc = _pre_online(node, fetch=fetch, peers=peers)
        await svc.start()  # a master syncs before serving
        try:
            return svc
        finally:
            await svc.stop()

    svc = asyncio.run(main())
    assert node.store.consumer_offsets.query("G", "T", 0) == 100
    assert node.store.consumer_offsets.query("G", "T", 1) == 35
    assert node.store.delay_offsets.table == {3: 7}
    assert svc.runtime_info() == {"offsetPreOnlineRaised": 1, "offsetPreOnlinePeers": 1}
    # ... and persisted: a restart sees the raised offset.
    again = ConsumerOffsetManager.load(str(tmp_path / "consumerOffset.json"))
    assert again.query("G", "T", 1) == 35


@async_test
async def test_pre_online_sync_does_nothing_on_a_slave_until_it_is_promoted(tmp_path):
    node = _fake_node(tmp_path, role=BrokerRole.SLAVE)
    calls = []

    async def fetch(addr, code):
        calls.append(code)
        return {"offsetTable": {"T@G": {"0": 5}}} if code == 43 else {}

    async def peers():
        return ["s2"]

    svc = _pre_online(node, fetch=fetch, peers=peers)
    await svc.start()
    assert calls == []
    node.role.announce(node.role.change(BrokerRole.SYNC_MASTER, 0))
    await wait_for(
        lambda: node.store.consumer_offsets.query("G", "T", 0) == 5,
        20_000,
        what="the reverse sync a promotion triggers",
    )
    await svc.stop()


# -- real processes ------------------------------------------------------------------------------

TOPIC = "OffsetTopic"
GROUP = "CG"


# A shared machine: generous deadlines.
_wait = functools.partial(wait_until, timeout_s=60.0)


# RocketMQ's offsets (commits on a slave, copied back): offsetCommitThroughLog off.
_conf = conf_factory(
    slaveSyncIntervalMs=200, flushConsumerOffsetInterval=200, offsetCommitThroughLog="false"
)


async def _call(addr: str, code: RequestCode, fields: dict | None = None) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields or {}), 5000)
    finally:
        await client.close()


def _commit(addr: str, queue_id: int, offset: int) -> None:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset}
    resp = asyncio.run(_call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, fields))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def _max_offset(addr: str, queue_id: int) -> int:
    fields = {"topic": TOPIC, "queueId": queue_id}
    resp = asyncio.run(_call(addr, RequestCode.GET_MAX_OFFSET, fields))
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1


async def _fill_queues(namesrv: str, master: str, per_queue: int) -> None:
    """At least ``per_queue`` messages in each of queues 0-3 (batches go to one queue each)."""
    producer = Producer("PG", [namesrv], retry_times=2)
    try:
        for _ in range(40):
            res = await producer.send_batch(TOPIC, [(b"m" * 20, None)] * per_queue)
            assert res.status is SendStatus.SEND_OK
            tops = [
                int(
                    (
                        await _call(
                            master, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q}
                        )
                    ).ext_fields["offset"]
                )
                for q in range(4)
            ]
            if min(tops) >= per_queue:
                return
        raise AssertionError(f"queues 0-3 not filled: {tops}")
    finally:
        await producer.close()


def _committed(addr: str, queue_id: int) -> int:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id}
    resp = asyncio.run(_call(addr, RequestCode.QUERY_CONSUMER_OFFSET, fields))
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_master_restart_never_moves_a_committed_offset_backwards(tmp_path, how):
    ns = start_namesrv(tmp_path)
    procs = [ns]
    try:
        (m_port, m_ha), (s_port, s_ha) = (free_port(), free_port()), (free_port(), free_port())
        m_conf = _conf(tmp_path, "m", 0, "ASYNC_MASTER", m_port, m_ha, ns.addr)
        s_conf = _conf(
            tmp_path, "s", 1, "SLAVE", s_port, s_ha, ns.addr, haMasterAddress=f"127.0.0.1:{m_ha}"
        )
        m = start_broker("m", m_conf, m_port, tmp_path)
        s = start_broker("s", s_conf, s_port, tmp_path)
        procs += [m, s]
        asyncio.run(_fill_queues(ns.addr, m.addr, 30))  # commits stay within the queues
        _wait(lambda: _max_offset(s.addr, 3) >= 30, what="messages replicated to the slave")
        for q in range(4):
            _commit(m.addr, q, 10 + q)
        # The slave copies the master's offsets (SlaveSynchronize, forward-only).
        _wait(lambda: _committed(s.addr, 3) == 13, what="offsets copied to the slave")
        if how == "sigterm":
            m.stop()  # the master persists consumerOffset.json with 10..13 on the way out
        else:
            m.kill()  # its consumerOffset.json is whatever the last periodic persist wrote

        # While the master is away, consumers go on committing on the slave.
        for q in range(4):
            _commit(s.addr, q, 20 + q)
        assert [_committed(s.addr, q) for q in range(4)] == [20, 21, 22, 23]

        # The master comes back with its older table; before it serves it takes the slave's.
        m2 = start_broker("m", m_conf, m_port, tmp_path)
        procs.append(m2)
        assert [_committed(m2.addr, q) for q in range(4)] == [20, 21, 22, 23]
        expected = "raised 10 -> 20" if how == "sigterm" else "-> 20 from"
        assert expected in (tmp_path / "m.log").read_text()

        # The slave keeps copying from the master: prove a copy round ran after the restart (a
        # new commit on queue 0 arrives), then that nothing on the slave went backwards.
        _commit(m2.addr, 0, 25)
        _wait(lambda: _committed(s.addr, 0) == 25, what="a slave sync round after the restart")
        assert [_committed(s.addr, q) for q in range(1, 4)] == [21, 22, 23]
        # A stale commit (an old consumer instance) does not move the master back either.
        _commit(m2.addr, 1, 15)
        assert _committed(m2.addr, 1) == 21
    finally:
        for p in procs:
            p.kill()
