import pytest

from broker.client.producer import Producer, SendFailedError, SendStatus
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.server import RemotingServer
from contracts.record.properties import string_to_properties
from tests.client.fakes import register, start_namesrv
from tests.support.aio import async_test

TOPICS = {"T": {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}}


def fake_broker(log, code=ResponseCode.SUCCESS):
    offsets = {}

    async def on_send(conn, req):
        qid = req.int_field("e")
        log.append((conn, req))
        offsets[qid] = offsets.get(qid, -1) + 1
        return req.make_response(
            code,
            ext_fields={
                "msgId": "7F00000100002A9F0000000000000000",
                "queueId": qid,
                "queueOffset": offsets[qid],
            },
        )

    return RemotingServer({RequestCode.SEND_MESSAGE_V2: on_send})


@async_test
async def test_round_robin_v2_header_and_status():
    ns = await start_namesrv()
    log_a, log_b = [], []
    a = await fake_broker(log_a).start()
    b = await fake_broker(log_b, ResponseCode.FLUSH_SLAVE_TIMEOUT).start()
    await register(ns, a, "a", TOPICS)
    await register(ns, b, "b", TOPICS)
    p = Producer("PG", [f"127.0.0.1:{ns.server.port}"])
    results = [await p.send("T", b"m%d" % i, tags="TagA", keys="k") for i in range(8)]
    queues = [(r.queue.broker_name, r.queue.queue_id) for r in results]
    assert sorted(set(queues)) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert all(queues.count(q) == 2 for q in set(queues))
    statuses = {r.queue.broker_name: r.status for r in results}
    assert statuses == {"a": SendStatus.SEND_OK, "b": SendStatus.FLUSH_SLAVE_TIMEOUT}
    _, req = log_a[0]
    assert req.ext_fields["a"] == "PG" and req.ext_fields["b"] == "T"
    assert req.ext_fields["c"] == "TBW102" and req.ext_fields["m"] == "false"
    props = string_to_properties(req.ext_fields["i"])
    assert props["TAGS"] == "TagA" and props["KEYS"] == "k" and len(props["UNIQ_KEY"]) == 32
    assert results[0].msg_id != results[1].msg_id and results[0].queue_offset == 0
    await p.close()
    for s in (a, b, ns.server):
        await s.stop()


@async_test
async def test_retry_goes_to_another_broker_and_fails_with_cause():
    ns = await start_namesrv()
    log_a, log_b = [], []
    a = await fake_broker(log_a, ResponseCode.SYSTEM_BUSY).start()
    b = await fake_broker(log_b).start()
    await register(ns, a, "a", TOPICS)
    await register(ns, b, "b", TOPICS)
    p = Producer("PG", [f"127.0.0.1:{ns.server.port}"])
    for _ in range(4):
        r = await p.send("T", b"x")
        assert r.queue.broker_name == "b" and r.status == SendStatus.SEND_OK
    await b.stop()
    with pytest.raises(SendFailedError, match="after 3 attempts") as info:
        await p.send("T", b"x")
    assert info.value.__cause__ is not None
    await p.close()
    for s in (a, ns.server):
        await s.stop()


@async_test
async def test_unknown_topic_goes_through_tbw102_route():
    ns = await start_namesrv()
    log_a = []
    a = await fake_broker(log_a).start()
    await register(ns, a, "a", {"TBW102": {"readQueueNums": 8, "writeQueueNums": 8}})
    p = Producer("PG", [f"127.0.0.1:{ns.server.port}"])
    r = await p.send("NewTopic", b"x")
    assert r.status == SendStatus.SEND_OK and log_a[0][1].ext_fields["b"] == "NewTopic"
    # The broker creates the topic with defaultTopicQueueNums (4) queues, so the client
    # never picks queue 4-7 of TBW102's 8 for it (RocketMQ clamps the same way).
    for _ in range(12):
        await p.send("NewTopic", b"y")
    assert {int(req.ext_fields["e"]) for _, req in log_a} <= {0, 1, 2, 3}
    await p.close()
    for s in (a, ns.server):
        await s.stop()
