"""The node's request handlers, on an in-process node over real sockets."""

import asyncio
import json
import time

import pytest

from broker.node import BrokerNode
from broker.processors.pull import parse_tag_codes, pull_code
from broker.remoting.client import RemotingClient, connect
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.results import GetMessageStatus, PutMessageResult, PutMessageStatus
from contracts.record.properties import java_string_hash, properties_to_string
from contracts.record.reader import decode_record
from tests.support.nodes import node_config, run_node
from tests.support.waiting import wait_for

_config = node_config  # the shared node config (tests/support/nodes.py)


def send_v2(topic, body, queue_id=0, tags=None, keys=None):
    props = {"WAIT": "true"}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "PG",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": queue_id,
            "f": 0,
            "g": 1700000000000,
            "h": 0,
            "i": properties_to_string(props),
            "j": 0,
            "k": False,
            "m": False,
        },
        body,
    )


def pull(topic, qid, offset, sub="*", sys_flag=0, suspend_ms=0, commit=0, group="CG"):
    return RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": qid,
            "queueOffset": offset,
            "maxMsgNums": 32,
            "sysFlag": sys_flag,
            "commitOffset": commit,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": sub,
        },
    )


def test_send_v1_long_names_and_v2_land_in_the_store(tmp_path):
    async def body(node, client, addr):
        r = await client.invoke(addr, send_v2("T1", b"x", queue_id=2, tags="A", keys="K"))
        assert r.code == ResponseCode.SUCCESS
        assert (r.int_field("queueId"), r.int_field("queueOffset")) == (2, 0)
        assert len(r.field("msgId")) == 32
        v1 = RemotingCommand.request(
            RequestCode.SEND_MESSAGE,
            {
                "producerGroup": "PG",
                "topic": "T1",
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 4,
                "queueId": 2,
                "sysFlag": 0,
                "bornTimestamp": 1,
                "flag": 3,
                "properties": properties_to_string({"TAGS": "B"}),
                "reconsumeTimes": 0,
            },
            b"y",
        )
        r = await client.invoke(addr, v1)
        assert r.code == 0 and r.int_field("queueOffset") == 1
        got = node.store.get_message("T1", 2, 0, 10)
        recs = [decode_record(b, 0) for b in got.records]
        assert [(x.body, x.flag, x.properties["TAGS"]) for x in recs] == [
            (b"x", 0, "A"),
            (b"y", 3, "B"),
        ]
        assert recs[0].properties["KEYS"] == "K" and recs[0].born_timestamp == 1700000000000
        assert node.store.topic_config.table["T1"]["writeQueueNums"] == 4
        # queue id beyond the topic's queues, and a non-integer header, are refused by name
        r = await client.invoke(addr, send_v2("T1", b"z", queue_id=9))
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[9]" in r.remark
        bad = send_v2("T1", b"z")
        bad.ext_fields["e"] = "x"
        r = await client.invoke(addr, bad)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "'queueId'" in r.remark
        bad = send_v2("T1", b"z")
        del bad.ext_fields["b"]
        r = await client.invoke(addr, bad)
        assert r.code == ResponseCode.SYSTEM_ERROR and "'topic'" in r.remark

    run_node(tmp_path, body)


def test_no_auto_create_means_topic_not_exist(tmp_path):
    async def body(node, client, addr):
        r = await client.invoke(addr, send_v2("T2", b"x"))
        assert r.code == ResponseCode.TOPIC_NOT_EXIST and "T2" in r.remark
        assert "TBW102" not in node.store.topic_config.table

    run_node(tmp_path, body, autoCreateTopicEnable="false")


@pytest.mark.parametrize(
    "status,code",
    [
        (PutMessageStatus.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_DISK_TIMEOUT),
        (PutMessageStatus.FLUSH_SLAVE_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT),
        (PutMessageStatus.SLAVE_NOT_AVAILABLE, ResponseCode.SLAVE_NOT_AVAILABLE),
        (PutMessageStatus.CREATE_MAPPED_FILE_FAILED, ResponseCode.SYSTEM_ERROR),
    ],
)
def test_put_status_maps_to_response_code(tmp_path, status, code):
    async def body(node, client, addr):
        async def put(msg):
            return PutMessageResult(status, 0, 10, "AB" * 16, 5, 1, remark="disk gone")

        node.store.put_message_async = put
        r = await client.invoke(addr, send_v2("T3", b"x"))
        assert r.code == code
        if code == ResponseCode.SYSTEM_ERROR:
            assert "CREATE_MAPPED_FILE_FAILED" in r.remark and "disk gone" in r.remark
        else:
            assert r.int_field("queueOffset") == 5

    run_node(tmp_path, body)


def test_slave_refuses_sends(tmp_path):
    async def body(node, client, addr):
        node.store.topic_config.put("T4", {"topicName": "T4", "writeQueueNums": 1, "perm": 6})
        r = await client.invoke(addr, send_v2("T4", b"x"))
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "SERVICE_NOT_AVAILABLE" in r.remark

    run_node(tmp_path, body, brokerRole="SLAVE", brokerId=1)


def test_pull_codes_follow_rocketmq():
    S = GetMessageStatus
    assert pull_code(S.FOUND, 3, True) == ResponseCode.SUCCESS
    assert pull_code(S.NO_MATCHED_MESSAGE, 3, True) == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert pull_code(S.OFFSET_OVERFLOW_ONE, 3, True) == ResponseCode.PULL_NOT_FOUND
    assert pull_code(S.OFFSET_OVERFLOW_BADLY, 9, True) == ResponseCode.PULL_OFFSET_MOVED
    assert pull_code(S.OFFSET_OVERFLOW_BADLY, 9, False) == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert pull_code(S.OFFSET_TOO_SMALL, 0, True) == ResponseCode.PULL_OFFSET_MOVED
    assert pull_code(S.NO_MESSAGE_IN_QUEUE, 0, True) == ResponseCode.PULL_NOT_FOUND
    assert pull_code(S.NO_MESSAGE_IN_QUEUE, 4, True) == ResponseCode.PULL_OFFSET_MOVED
    assert parse_tag_codes("*") is None and parse_tag_codes("") is None
    assert parse_tag_codes("a || b") == {java_string_hash("a"), java_string_hash("b")}


def test_pull_filters_tags_commits_offsets_and_reports_moves(tmp_path):
    async def body(node, client, addr):
        for i in range(6):
            r = await client.invoke(addr, send_v2("TP", str(i).encode(), tags="ab"[i % 2]))
            assert r.code == 0
        r = await client.invoke(addr, pull("TP", 0, 0, sub="b"))
        assert r.code == ResponseCode.SUCCESS and r.int_field("nextBeginOffset") == 6
        bodies = []
        pos = 0
        while pos < len(r.body):
            rec = decode_record(r.body, pos)
            bodies.append(rec.body)
            pos += rec.total_size
        assert bodies == [b"1", b"3", b"5"]
        assert (r.int_field("minOffset"), r.int_field("maxOffset")) == (0, 6)
        assert r.int_field("suggestWhichBrokerId") == 0
        r = await client.invoke(addr, pull("TP", 0, 6))
        assert r.code == ResponseCode.PULL_NOT_FOUND and r.int_field("nextBeginOffset") == 6
        r = await client.invoke(addr, pull("TP", 0, 60))
        assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.int_field("nextBeginOffset") == 6
        r = await client.invoke(addr, pull("TP", 1, 0))
        assert r.code == ResponseCode.PULL_NOT_FOUND
        r = await client.invoke(addr, pull("Nope", 0, 0))
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        # commit-offset flag: the committed offset reaches the offset table on a master
        r = await client.invoke(addr, pull("TP", 0, 2, sys_flag=0x1 | 0x4, commit=2))
        assert r.code == 0
        await wait_for(  # (a record in the log first: offsetCommitThroughLog)
            lambda: node.store.consumer_offsets.query("CG", "TP", 0) == 2,
            20_000,
            what="the pull's commit to reach the table",
            every_ms=5,
        )

    run_node(tmp_path, body)


def test_long_poll_wakes_on_dispatch_and_times_out(tmp_path):
    async def body(node, client, addr):
        await client.invoke(addr, send_v2("TL", b"first"))
        t0 = time.monotonic()
        r = await client.invoke(addr, pull("TL", 0, 1, sys_flag=0x2, suspend_ms=300))
        waited = time.monotonic() - t0
        assert r.code == ResponseCode.PULL_NOT_FOUND and 0.25 <= waited < 2

        t0 = time.monotonic()
        held = asyncio.ensure_future(
            client.invoke(addr, pull("TL", 0, 1, sys_flag=0x2, suspend_ms=10_000), 15_000)
        )
        await wait_for(lambda: ("TL", 0) in node.long_poll._waiters, 5000, what="pull parked")
        other = RemotingClient()
        r = await other.invoke(addr, send_v2("TL", b"second"))
        await other.close()
        r = await held
        assert r.code == ResponseCode.SUCCESS and time.monotonic() - t0 < 5
        assert decode_record(r.body, 0).body == b"second"

    run_node(tmp_path, body)


def test_offsets_heartbeat_consumer_list_and_config_dumps(tmp_path, driven_clock):
    async def body(node, client, addr):
        for i in range(3):
            await client.invoke(addr, send_v2("TO", str(i).encode()))
        q = {"consumerGroup": "G", "topic": "TO", "queueId": 0}
        r = await client.invoke(addr, RemotingCommand.request(14, q))
        assert r.code == ResponseCode.SUCCESS and r.int_field("offset") == 0  # queue from 0
        # the commit is a record of the offset log, coalesced on the node's (driven) clock
        commit = asyncio.ensure_future(
            client.invoke(addr, RemotingCommand.request(15, {**q, "commitOffset": 2}))
        )
        for _ in range(200):
            if commit.done():
                break
            await driven_clock.advance(10)
        assert (await commit).code == ResponseCode.SUCCESS
        r = await client.invoke(addr, RemotingCommand.request(14, q))
        assert r.code == 0 and r.int_field("offset") == 2
        r = await client.invoke(addr, RemotingCommand.request(30, {"topic": "TO", "queueId": 0}))
        assert r.int_field("offset") == 3
        r = await client.invoke(addr, RemotingCommand.request(31, {"topic": "TO", "queueId": 0}))
        assert r.int_field("offset") == 0
        r = await client.invoke(
            addr, RemotingCommand.request(29, {"topic": "TO", "queueId": 0, "timestamp": 0})
        )
        assert r.code == 0 and r.int_field("offset") == 0

        hb = {
            "clientID": "c1",
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": "G",
                    "subscriptionDataSet": [{"topic": "TO", "subString": "x || y"}],
                }
            ],
        }
        conn1 = await connect(addr)
        assert (
            await conn1.invoke(RemotingCommand.request(34, body=json.dumps(hb).encode()))
        ).code == 0
        notified = asyncio.Event()

        async def on_notify(conn, req):
            notified.set()

        conn2 = await connect(addr, {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify})
        hb2 = dict(hb, clientID="c2")
        assert (
            await conn2.invoke(RemotingCommand.request(34, body=json.dumps(hb2).encode()))
        ).code == 0
        r = await client.invoke(addr, RemotingCommand.request(38, {"consumerGroup": "G"}))
        assert json.loads(r.body)["consumerIdList"] == ["c1", "c2"]
        assert node.consumers.subscription("G", "TO") == "x || y"
        # c1's connection closes: it leaves the group and c2 is told
        await conn1.close()
        await wait_for(lambda: node.consumers.ids("G") == ["c2"], 5000, what="c1 gone")
        await asyncio.wait_for(notified.wait(), 5)
        r = await conn2.invoke(
            RemotingCommand.request(35, {"clientID": "c2", "consumerGroup": "G"})
        )
        assert r.code == 0 and node.consumers.ids("G") == []
        r = await client.invoke(addr, RemotingCommand.request(38, {"consumerGroup": "G"}))
        assert r.code == ResponseCode.SYSTEM_ERROR
        bad = await client.invoke(addr, RemotingCommand.request(34, body=b"{nope"))
        assert bad.code == ResponseCode.SYSTEM_ERROR and "HeartbeatData" in bad.remark
        await conn2.close()

        r = await client.invoke(addr, RemotingCommand.request(21))
        # the consumer group's retry topic exists from its first heartbeat on (RocketMQ)
        assert set(json.loads(r.body)["topicConfigTable"]) == {"TBW102", "TO", "%RETRY%G"}
        r = await client.invoke(addr, RemotingCommand.request(43))
        assert json.loads(r.body)["offsetTable"] == {"TO@G": {"0": 2}}
        r = await client.invoke(addr, RemotingCommand.request(45))
        assert json.loads(r.body)["offsetTable"] == {}
        r = await client.invoke(addr, RemotingCommand.request(201))
        assert "subscriptionGroupTable" in json.loads(r.body)
        # consumerOffset.json is persisted periodically (every 200 ms of the node's clock)
        path = tmp_path / "store" / "config" / "consumerOffset.json"
        await driven_clock.advance(200)
        assert path.exists() and "TO@G" in path.read_text()

    run_node(tmp_path, body, clock=driven_clock, flushConsumerOffsetInterval=200)


class _FakeConn:
    def __init__(self, peer):
        self.peer = peer
        self.closed = asyncio.Event()
        self.sent = []

    async def invoke_oneway(self, req):
        self.sent.append(req.code)


def test_silent_consumers_expire_by_injected_clock():
    from broker.processors.admin import ConsumerManager

    async def main():
        now = [1_000_000]
        cm = ConsumerManager(clock_ms=lambda: now[0])
        a, b = _FakeConn("a:1"), _FakeConn("b:1")
        cm.heartbeat(a, "ca", "G", {"T": "*"})
        now[0] += 60_000
        cm.heartbeat(b, "cb", "G", {"T": "*"})
        now[0] += 60_001  # ca silent 120,001 ms, cb 60,001 ms
        assert cm.scan_idle(120_000) == [("G", "ca")]
        assert cm.ids("G") == ["cb"]
        await asyncio.sleep(0)
        assert RequestCode.NOTIFY_CONSUMER_IDS_CHANGED in b.sent
        cm.cancel()

    asyncio.run(main())


def test_malformed_pull_header_is_named(tmp_path):
    async def body(node, client, addr):
        await client.invoke(addr, send_v2("TM", b"x"))
        req = pull("TM", 0, 0)
        req.ext_fields["sysFlag"] = "lots"
        r = await client.invoke(addr, req)
        assert r.code == ResponseCode.SYSTEM_ERROR and "'sysFlag'" in r.remark

    run_node(tmp_path, body)


def test_sync_flush_send_and_stop_with_a_parked_pull(tmp_path):
    async def main():
        node = await BrokerNode.start(_config(tmp_path, flushDiskType="SYNC_FLUSH"), "127.0.0.1")
        addr = f"127.0.0.1:{node.server.port}"
        client = RemotingClient()
        r = await client.invoke(addr, send_v2("TS", b"durable"))
        assert r.code == ResponseCode.SUCCESS and r.int_field("queueOffset") == 0
        assert node.store.flushed_offset >= node.store.max_phy_offset
        held = asyncio.ensure_future(
            client.invoke(addr, pull("TS", 0, 1, sys_flag=0x2, suspend_ms=30_000), 35_000)
        )
        await wait_for(lambda: ("TS", 0) in node.long_poll._waiters, 5000, what="pull parked")
        t0 = time.monotonic()
        await node.stop()
        assert time.monotonic() - t0 < 5  # the parked pull does not hold shutdown up
        outcome = await asyncio.gather(held, return_exceptions=True)
        assert outcome[0] is not None
        await client.close()

    asyncio.run(main())
    # the store was released cleanly: it opens again without crash recovery
    from broker.store.message_store import MessageStore

    store = MessageStore.open(_config(tmp_path))
    try:
        assert store.get_max_offset_in_queue("TS", 0) == 1
    finally:
        store.shutdown()


def test_an_oversized_body_is_message_illegal(tmp_path):
    async def body(node, client, addr):
        r = await client.invoke(addr, send_v2("T5", b"x" * 4096))
        assert r.code == ResponseCode.MESSAGE_ILLEGAL, (r.code, r.remark)
        assert "too large" in r.remark
        assert (await client.invoke(addr, send_v2("T5", b"x"))).code == ResponseCode.SUCCESS

    run_node(tmp_path, body, maxMessageSize=1024)


def test_a_client_auto_creates_at_most_its_share_of_topics(tmp_path):
    async def body(node, client, addr):
        for i in range(3):
            r = await client.invoke(addr, send_v2(f"Auto{i}", b"x"))
            assert r.code == ResponseCode.SUCCESS, r.remark
        r = await client.invoke(addr, send_v2("Auto3", b"x"))
        assert (
            r.code == ResponseCode.TOPIC_NOT_EXIST and "autoCreateTopicMaxPerClient=3" in r.remark
        )
        assert "Auto3" not in node.store.topic_config.table
        # what it created stays writable
        assert (await client.invoke(addr, send_v2("Auto0", b"y"))).code == ResponseCode.SUCCESS

    run_node(tmp_path, body, autoCreateTopicMaxPerClient=3)
