"""Name server registration: new topics go as deltas (only the changed topics, with the
table's dataVersion), the whole table periodically and on request (RocketMQ's
registerIncrementBrokerData / registerBrokerAll)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from broker.clock import DrivenClock
from broker.registration import REGISTER_INTERVAL_MS, NamesrvRegistration
from broker.remoting.codes import ResponseCode
from broker.store.config_store import topic_config
from broker.store.role import BrokerRoleState
from broker.store.store_config import BrokerRole
from broker.store.topic_configs import TopicConfigManager


class Recorder:
    """A name server stand-in: records each REGISTER_BROKER's topics and incremental flag."""

    def __init__(self, register_full=False):
        self.sent: list[tuple[str, set[str], bool]] = []
        self.register_full = register_full

    async def invoke(self, addr, req, timeout_ms):
        wrapper = json.loads(req.body)["topicConfigSerializeWrapper"]
        incremental = req.ext_fields.get("incremental") == "true"
        self.sent.append((addr, set(wrapper["topicConfigTable"]), incremental))
        fields = {"registerFull": "true"} if self.register_full and incremental else {}
        return req.make_response(ResponseCode.SUCCESS, ext_fields=fields)


def _registration(tmp_path, client):
    topics = TopicConfigManager.load(str(tmp_path / "topics.json"))
    for i in range(100):
        topics.put(f"Old{i}", topic_config(f"Old{i}", 4))
    config = SimpleNamespace(
        broker_name="b",
        broker_addr="127.0.0.1:1",
        broker_cluster_name="C",
        ha_server_addr="127.0.0.1:2",
        namesrv_addrs=["ns1:9876", "ns2:9876"],
    )
    store = SimpleNamespace(topic_config=topics)
    replication = SimpleNamespace(ha_client=None)
    clock = DrivenClock()
    reg = NamesrvRegistration(
        config,
        store,
        BrokerRoleState(BrokerRole.ASYNC_MASTER, 0),
        replication,
        client,
        clock=clock,
    )
    return reg, topics, clock


def test_new_topics_are_registered_as_deltas_and_the_table_periodically(tmp_path):
    async def main():
        client = Recorder()
        reg, topics, clock = _registration(tmp_path, client)
        await reg._register_round()  # the first round: the whole table to each
        assert [(a, len(t), inc) for a, t, inc in client.sent] == [
            ("ns1:9876", 100, False),
            ("ns2:9876", 100, False),
        ]
        client.sent.clear()
        topics.create_in_send_back("%RETRY%G", 1, 6)
        topics.put("New", topic_config("New", 4))
        await reg._register_round()
        assert client.sent == [
            ("ns1:9876", {"%RETRY%G", "New"}, True),
            ("ns2:9876", {"%RETRY%G", "New"}, True),
        ]
        client.sent.clear()
        await reg._register_round()  # nothing changed: nothing sent
        assert client.sent == []
        topics.delete("Old3")  # a deletion is not a delta: the table
        await reg._register_round()
        assert [(len(t), inc) for _, t, inc in client.sent] == [(101, False)] * 2
        client.sent.clear()
        await clock.advance(REGISTER_INTERVAL_MS)
        await reg._register_round()  # the periodic whole table
        assert [inc for _, _, inc in client.sent] == [False, False]
        client.sent.clear()
        reg.request()  # a role change: the whole table at once
        await reg._register_round()
        assert [inc for _, _, inc in client.sent] == [False, False]

    asyncio.run(main())


def test_a_name_server_without_the_table_gets_it_whole_next(tmp_path):
    async def main():
        client = Recorder(register_full=True)
        reg, topics, _ = _registration(tmp_path, client)
        await reg._register_round()
        client.sent.clear()
        topics.put("New", topic_config("New", 4))
        await reg._register_round()
        assert [inc for _, _, inc in client.sent] == [True, True]
        client.sent.clear()
        await reg._register_round()  # both asked for the table
        assert [(len(t), inc) for _, t, inc in client.sent] == [(101, False)] * 2

    asyncio.run(main())
