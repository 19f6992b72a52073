"""Topic creation as RocketMQ's broker does it, found by the JavaScript client ali-ons (which
creates topics with UPDATE_AND_CREATE_TOPIC and routes %RETRY%{group} from its first start):
in-process name server + broker node over real sockets."""

import asyncio
import json

from broker.client.routes import fetch_route
from broker.config import BrokerConfig
from broker.namesrv import NameServer
from broker.node import BrokerNode
from broker.processors.topics import topic_name_problem
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.topic_configs import TopicConfigManager


def _run(tmp_path, body, **conf):
    async def main():
        ns = NameServer()
        await ns.server.start()
        ns_addr = f"127.0.0.1:{ns.server.port}"
        config = BrokerConfig.from_dict(
            {
                "storePathRootDir": str(tmp_path / "store"),
                "listenPort": 0,
                "mappedFileSizeCommitLog": 1 << 20,
                "namesrvAddr": ns_addr,
                **conf,
            }
        )
        node = await BrokerNode.start(config, "127.0.0.1")
        client = RemotingClient()
        try:
            await body(node, client, f"127.0.0.1:{node.server.port}", ns_addr)
        finally:
            await client.close()
            await node.stop()
            await ns.server.stop()

    asyncio.run(main())


def _create(topic, queues=4, **extra):
    header = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
        **extra,
    }
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)


def test_update_and_create_topic_is_routable_when_answered(tmp_path):
    async def body(node, client, addr, ns_addr):
        resp = await client.invoke(addr, _create("JsTopic", queues=3))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        # registered before the answer: the route is there at once
        route = await fetch_route(client, [ns_addr], "JsTopic")
        assert [(q.broker_name, q.queue_id) for q in route.queues(0x2)] == [
            ("broker-a", 0),
            ("broker-a", 1),
            ("broker-a", 2),
        ]
        tc = node.store.topic_config.table["JsTopic"]
        assert (tc["readQueueNums"], tc["writeQueueNums"], tc["perm"]) == (3, 3, 6)
        # an update replaces the config (here: read-only, 8 read queues)
        resp = await client.invoke(addr, _create("JsTopic", queues=8, perm=4))
        assert resp.code == ResponseCode.SUCCESS
        assert node.store.topic_config.table["JsTopic"]["perm"] == 4
        # durable when answered: what a restart loads (topics.json and its change log)
        saved = TopicConfigManager.load(node.store.topic_config.file.path)
        assert saved.get("JsTopic")["readQueueNums"] == 8

    _run(tmp_path, body, brokerName="broker-a")


def test_update_and_create_topic_refusals(tmp_path):
    async def body(node, client, addr, ns_addr):
        for topic, words in [
            ("bad topic", "illegal characters"),
            ("x" * 128, "longer than"),
            ("TBW102", "conflict with system topic"),
            ("SCHEDULE_TOPIC_XXXX", "conflict with system topic"),
        ]:
            resp = await client.invoke(addr, _create(topic))
            assert resp.code == ResponseCode.SYSTEM_ERROR and words in resp.remark, topic
        bad_filter = await client.invoke(addr, _create("T1", topicFilterType="NONE"))
        assert (
            bad_filter.code == ResponseCode.SYSTEM_ERROR and "topicFilterType" in bad_filter.remark
        )
        missing = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T2"})
        resp = await client.invoke(addr, missing)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "readQueueNums" in resp.remark
        assert not {"T1", "T2"} & set(node.store.topic_config.table)

    _run(tmp_path, body)


def test_topic_name_rules():
    assert topic_name_problem("Topic_A-1%x|y") is None
    assert "blank" in topic_name_problem("  ")
    assert "system" in topic_name_problem("rmq_sys_anything")


def test_first_heartbeat_creates_and_registers_the_groups_retry_topic(tmp_path):
    async def body(node, client, addr, ns_addr):
        hb = {
            "clientID": "js@1",
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": "CG_js",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "subscriptionDataSet": [{"topic": "JsTopic", "subString": "*"}],
                }
            ],
        }
        req = RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())
        assert (await client.invoke(addr, req)).code == ResponseCode.SUCCESS
        tc = node.store.topic_config.table["%RETRY%CG_js"]
        assert (tc["readQueueNums"], tc["writeQueueNums"], tc["perm"]) == (1, 1, 6)
        assert "CG_js" in node.store.subscription_groups.table
        # routable as soon as the heartbeat is answered (registered before the answer)
        route = await fetch_route(client, [ns_addr], "%RETRY%CG_js")
        assert [q.queue_id for q in route.queues(0x4)] == [0]
        # a second heartbeat changes nothing (an existing config wins)
        node.store.topic_config.table["%RETRY%CG_js"]["perm"] = 4
        req = RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())
        assert (await client.invoke(addr, req)).code == ResponseCode.SUCCESS
        assert node.store.topic_config.table["%RETRY%CG_js"]["perm"] == 4

    _run(tmp_path, body)


def test_a_slave_refuses_topic_updates(tmp_path):
    async def body(node, client, addr, ns_addr):
        resp = await client.invoke(addr, _create("JsTopic"))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "slave" in resp.remark
        assert "JsTopic" not in node.store.topic_config.table

    _run(tmp_path, body, brokerRole="SLAVE", brokerId=1, haMasterAddress="127.0.0.1:1")
