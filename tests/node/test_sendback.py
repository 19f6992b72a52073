"""CONSUMER_SEND_MSG_BACK on an in-process node over real sockets: %RETRY% with delay levels,
reconsumeTimes, RETRY_TOPIC / ORIGIN_MESSAGE_ID, and %DLQ% at maxReconsumeTimes or level < 0."""

import asyncio

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.delay import SCHEDULE_TOPIC
from contracts.record.properties import properties_to_string
from tests.support.nodes import run_node


def send(topic, body, tags="TagA"):
    props = {"TAGS": tags, "UNIQ_KEY": "C0FFEE" + body.hex().upper(), "WAIT": "true"}
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "PG",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": 0,
            "f": 0,
            "g": 1,
            "h": 0,
            "i": properties_to_string(props),
            "j": 0,
            "k": False,
            "m": False,
        },
        body,
    )


def send_back(offset, group="CG", delay_level=0, max_times=None, origin_topic="T"):
    fields = {
        "offset": offset,
        "group": group,
        "delayLevel": delay_level,
        "originMsgId": "ignored-by-the-broker",
        "originTopic": origin_topic,
        "unitMode": False,
    }
    if max_times is not None:
        fields["maxReconsumeTimes"] = max_times
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields)


def only_record(node, topic, qid=0):
    cq = node.store.queues[(topic, qid)]
    assert cq.max_offset_in_queue == 1, f"{topic}/{qid} holds {cq.max_offset_in_queue}"
    phy, _, _ = cq.get(0)
    return node.store.look_message_by_offset(phy)


def test_first_send_back_goes_to_retry_through_level_three(tmp_path):
    async def body(node, client, addr):
        r = await client.invoke(addr, send("T", b"fails"))
        assert r.code == ResponseCode.SUCCESS
        first_id = r.field("msgId")
        offset = node.store.queues[("T", 0)].get(0)[0]
        r = await client.invoke(addr, send_back(offset))
        assert r.code == ResponseCode.SUCCESS, r.remark
        tc = node.store.topic_config.table["%RETRY%CG"]
        assert (tc["readQueueNums"], tc["writeQueueNums"], tc["perm"]) == (1, 1, 6)
        assert node.store.subscription_groups.table["CG"]["retryMaxTimes"] == 16
        # delay level 0 → 3 + reconsumeTimes(0) = level 3, schedule queue 2
        rec = only_record(node, SCHEDULE_TOPIC, 2)
        assert rec.properties["DELAY"] == "3"
        assert rec.properties["REAL_TOPIC"] == "%RETRY%CG"
        assert rec.properties["RETRY_TOPIC"] == "T"
        assert rec.properties["ORIGIN_MESSAGE_ID"] == first_id
        assert rec.properties["WAIT"] == "false"
        assert rec.reconsume_times == 1 and rec.body == b"fails"

    run_node(tmp_path, body)


def test_retries_keep_origin_and_climb_levels_then_land_in_dlq(tmp_path):
    async def body(node, client, addr):
        r = await client.invoke(addr, send("T", b"poison"))
        first_id = r.field("msgId")
        offset = node.store.queues[("T", 0)].get(0)[0]
        # a consumer returns the message 3 times with maxReconsumeTimes=3, as if each retry
        # came back from %RETRY%CG: follow the chain through the schedule topic by hand
        for attempt in range(3):
            r = await client.invoke(addr, send_back(offset, max_times=3))
            assert r.code == ResponseCode.SUCCESS, r.remark
            level = 3 + attempt
            cq = node.store.queues[(SCHEDULE_TOPIC, level - 1)]
            phy = cq.get(cq.max_offset_in_queue - 1)[0]
            rec = node.store.look_message_by_offset(phy)
            assert rec.properties["DELAY"] == str(level)
            assert rec.reconsume_times == attempt + 1
            assert rec.properties["ORIGIN_MESSAGE_ID"] == first_id
            assert rec.properties["RETRY_TOPIC"] == "T"
            offset = phy
        # reconsumeTimes 3 >= 3: dead letter queue, no delay
        r = await client.invoke(addr, send_back(offset, max_times=3))
        assert r.code == ResponseCode.SUCCESS, r.remark
        rec = only_record(node, "%DLQ%CG")
        assert "DELAY" not in rec.properties
        assert rec.reconsume_times == 4
        assert rec.properties["ORIGIN_MESSAGE_ID"] == first_id

    run_node(tmp_path, body)


def test_negative_delay_level_goes_straight_to_dlq(tmp_path):
    async def body(node, client, addr):
        await client.invoke(addr, send("T", b"now-dead"))
        offset = node.store.queues[("T", 0)].get(0)[0]
        r = await client.invoke(addr, send_back(offset, delay_level=-1))
        assert r.code == ResponseCode.SUCCESS, r.remark
        rec = only_record(node, "%DLQ%CG")
        assert rec.body == b"now-dead" and rec.reconsume_times == 1
        assert (SCHEDULE_TOPIC, 2) not in node.store.queues

    run_node(tmp_path, body)


def test_explicit_delay_level_and_bad_requests(tmp_path):
    async def body(node, client, addr):
        await client.invoke(addr, send("T", b"m"))
        offset = node.store.queues[("T", 0)].get(0)[0]
        r = await client.invoke(addr, send_back(offset, delay_level=1))
        assert r.code == ResponseCode.SUCCESS
        assert only_record(node, SCHEDULE_TOPIC, 0).properties["DELAY"] == "1"
        # an offset that holds no message
        r = await client.invoke(addr, send_back(offset + 7))
        assert r.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in r.remark
        # a missing field is named
        req = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "CG"})
        r = await client.invoke(addr, req)
        assert r.code == ResponseCode.SYSTEM_ERROR and "'offset'" in r.remark

    run_node(tmp_path, body)


def test_consumer_send_back_returns_through_retry_topic_on_real_processes(start_broker, namesrv):
    import time

    from broker.client.consumer import Consumer, decode_pull_body
    from broker.client.producer import Producer
    from broker.client.routes import TopicNotExistError

    broker = start_broker()

    async def main():
        producer = Producer("PG", [namesrv.addr])
        consumer = Consumer("CG", [namesrv.addr], "RetryTopic")
        client = RemotingClient()
        try:
            sent = await producer.send("RetryTopic", b"try-again", tags="A")
            deadline = time.monotonic() + 30
            got = []
            while not got:
                assert time.monotonic() < deadline, "message never consumed"
                try:
                    got = await consumer.poll()
                except TopicNotExistError:
                    # the broker registers the topic it auto-created with the name server
                    # on its own time: the route appears soon after the send returns
                    await asyncio.sleep(0.05)
            (rec,) = got
            await consumer.send_back(rec, delay_level=1)  # 1 s
            while True:  # polling the retry queue with a deadline
                assert time.monotonic() < deadline, "retry never delivered"
                req = RemotingCommand.request(
                    RequestCode.PULL_MESSAGE,
                    {
                        "consumerGroup": "CG",
                        "topic": "%RETRY%CG",
                        "queueId": 0,
                        "queueOffset": 0,
                        "maxMsgNums": 32,
                        "sysFlag": 0,
                        "commitOffset": 0,
                        "suspendTimeoutMillis": 0,
                        "subscription": "*",
                    },
                )
                resp = await client.invoke(broker.addr, req, 5000)
                if resp.code == ResponseCode.SUCCESS:
                    break
                await asyncio.sleep(0.05)
            (retry,) = decode_pull_body(resp.body, "retry")
            assert retry.body == b"try-again" and retry.reconsume_times == 1
            assert retry.properties["RETRY_TOPIC"] == "RetryTopic"
            assert retry.properties["ORIGIN_MESSAGE_ID"] == sent.offset_msg_id
            assert retry.store_timestamp - rec.store_timestamp >= 1000
        finally:
            await producer.close()
            await consumer.close()
            await client.close()

    asyncio.run(main())
    assert broker.terminate() == 0
