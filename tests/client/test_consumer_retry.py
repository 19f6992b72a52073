"""Our consumer subscribes its group's %RETRY% topic in clustering mode (as RocketMQ's client
does): a message whose handler fails once is sent back (CONSUMER_SEND_MSG_BACK) and comes back
to the same consumer after its delay level, under its original topic. Real processes."""

import asyncio

from broker.client.consumer import Consumer
from broker.client.producer import Producer, SendStatus
from tests.interop.cluster import committed_offsets, single_broker
from tests.support.waiting import wait_for

TOPIC = "RetryE2E"
GROUP = "CG_retry"
N = 6


def test_a_message_failed_once_returns_through_the_retry_topic(tmp_path):
    # delay level 0 in a send back: the broker picks 3 + reconsumeTimes, clamped to the
    # highest level here (2 s)
    with single_broker(tmp_path, messageDelayLevel="1s 2s") as (ns, broker):

        async def main():
            producer = Producer("PG_retry", [ns.addr])
            consumer = Consumer(GROUP, [ns.addr], TOPIC, persist_interval_ms=0)
            try:
                for i in range(N):
                    res = await producer.send(TOPIC, b"m%d" % i, tags=f"T{i % 2}", keys=f"k{i}")
                    assert res.status is SendStatus.SEND_OK
                failed, firsts, again = None, {}, None

                async def redelivered():
                    nonlocal failed, again
                    recs = await consumer.poll()
                    for rec in recs:
                        if rec.body == b"m3" and failed is not None:
                            again = rec
                        elif rec.body == b"m3":  # the handler fails: hand it back
                            failed = rec
                            await consumer.send_back(rec)
                        else:
                            firsts[rec.body] = rec
                    return again

                await wait_for(redelivered, 60_000, what="m3 redelivered", every_ms=50)
                assert sorted(firsts) == [b"m%d" % i for i in range(N) if i != 3]
                # back under its original topic, with its tags and keys, one reconsume later
                assert again.topic == TOPIC and again.reconsume_times == 1
                assert again.tags == "T1" and again.properties["KEYS"] == "k3"
                assert again.properties["RETRY_TOPIC"] == TOPIC
                assert again.properties["ORIGIN_MESSAGE_ID"] == failed.msg_id
                assert again.store_timestamp - failed.store_timestamp >= 2000
                assert any(mq.topic == "%RETRY%" + GROUP for mq in consumer.assigned)
            finally:
                await producer.close()
                await consumer.close()  # commits the offsets

        asyncio.run(main())
        assert committed_offsets(broker.addr, GROUP, "%RETRY%" + GROUP, 1) == {0: 1}
        assert sum(committed_offsets(broker.addr, GROUP, TOPIC, 4).values()) == N
