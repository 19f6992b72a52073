"""Delayed messages: schedule topic at put time, delivery when due (injected clock), offsets
in delayOffset.json across a restart, and one real broker process with level 1 (1 s)."""

import asyncio
import json
import time

import pytest

from broker.client.consumer import decode_pull_body
from broker.client.producer import Producer
from broker.config import BrokerConfig, BrokerRole
from broker.live_config import LiveConfig
from broker.node_parts import TopicAutoCreate
from broker.processors.send import SendProcessor
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.schedule import ScheduleMessageService
from broker.store.delay import SCHEDULE_TOPIC
from broker.store.message_store import MessageStore
from contracts.errors import ConfigError
from contracts.record.model import Message
from contracts.record.properties import tags_hash_code


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def _config(tmp_path, **kw):
    return BrokerConfig.from_dict(
        {"storePathRootDir": str(tmp_path / "store"), "mappedFileSizeCommitLog": 1 << 20, **kw}
    )


def _open(tmp_path, clock, **kw):
    store = MessageStore.open(_config(tmp_path, **kw), clock_ms=clock)
    store.start()
    config = LiveConfig(store.config)
    topics = TopicAutoCreate(store, config, on_created=lambda: None)
    return (
        store,
        SendProcessor(store, config, topics),
        ScheduleMessageService(store, clock_ms=clock),
    )


def _msg(topic, body, queue_id, level, tags="TagA"):
    props = {"TAGS": tags, "UNIQ_KEY": body.hex().upper(), "WAIT": "true"}
    if level is not None:
        props["DELAY"] = str(level)
    return Message(topic, body, queue_id, properties=props, born_timestamp=1)


def _records(store, topic, qid):
    cq = store.queues.get((topic, qid))
    if cq is None:
        return []
    return [
        store.look_message_by_offset(phy)
        for _, phy, _, _ in cq.iter_from(cq.min_offset_in_queue, 1000)
    ]


def test_delayed_message_waits_in_the_schedule_topic_until_due(tmp_path):
    clock = Clock(1_000_000)
    store, send, sched = _open(tmp_path, clock)

    async def main():
        result, status = await send.put(_msg("T", b"late", 2, level=2))  # level 2 = 5 s
        assert status.ok and result.queue_offset == 0
        cq = store.queues[(SCHEDULE_TOPIC, 1)]
        (_, phy, _, deliver_ms) = next(cq.iter_from(0, 1))
        assert deliver_ms == 1_005_000  # store timestamp + 5 s
        rec = store.look_message_by_offset(phy)
        assert rec.properties["REAL_TOPIC"] == "T" and rec.properties["REAL_QID"] == "2"
        assert _records(store, "T", 2) == []

        clock.now_ms = 1_004_999
        assert await sched.deliver_due() == 0
        assert _records(store, "T", 2) == []

        clock.now_ms = 1_005_000
        assert await sched.deliver_due() == 1
        (got,) = _records(store, "T", 2)
        assert got.body == b"late" and got.topic == "T" and got.queue_id == 2
        assert "DELAY" not in got.properties
        assert got.properties["WAIT"] == "false"
        assert got.properties["REAL_TOPIC"] == "T" and got.properties["TAGS"] == "TagA"
        # the real topic's entry carries the tag hash again, not a time
        assert store.queues[("T", 2)].get(0)[2] == tags_hash_code("TagA")
        assert store.delay_offsets.table == {2: 1}
        assert await sched.deliver_due() == 0  # delivered once only
        info = sched.runtime_info()
        assert info["scheduleMessageOffset_2"] == "1,1"

    try:
        asyncio.run(main())
    finally:
        store.shutdown()


def test_levels_deliver_independently_and_a_too_high_level_is_clamped(tmp_path):
    clock = Clock(2_000_000)
    store, send, sched = _open(tmp_path, clock, messageDelayLevel="1s 3s")

    async def main():
        await send.put(_msg("T", b"three", 0, level=9))  # clamped to level 2 (3 s)
        await send.put(_msg("T", b"one", 0, level=1))
        assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 1) == 1
        clock.now_ms += 1000
        assert await sched.deliver_due() == 1
        assert [r.body for r in _records(store, "T", 0)] == [b"one"]
        clock.now_ms += 2000
        assert await sched.deliver_due() == 1
        assert [r.body for r in _records(store, "T", 0)] == [b"one", b"three"]

    try:
        asyncio.run(main())
    finally:
        store.shutdown()


def test_restart_resumes_from_delay_offset_json(tmp_path):
    clock = Clock(3_000_000)
    store, send, sched = _open(tmp_path, clock)

    async def first_run():
        await send.put(_msg("T", b"a", 0, level=1))
        clock.now_ms += 500
        await send.put(_msg("T", b"b", 0, level=1))
        clock.now_ms += 500  # a due, b not yet
        assert await sched.deliver_due() == 1
        await sched.stop()  # persists

    asyncio.run(first_run())
    store.shutdown()
    doc = json.loads((tmp_path / "store" / "config" / "delayOffset.json").read_text())
    assert doc["offsetTable"] == {"1": 1}

    store, send, sched = _open(tmp_path, clock)

    async def second_run():
        assert store.delay_offsets.table == {1: 1}
        clock.now_ms += 500
        assert await sched.deliver_due() == 1
        assert [r.body for r in _records(store, "T", 0)] == [b"a", b"b"]

    try:
        asyncio.run(second_run())
    finally:
        store.shutdown()


def test_rebuilt_schedule_queue_keeps_delivery_times(tmp_path):
    clock = Clock(4_000_000)
    store, send, sched = _open(tmp_path, clock)

    async def main():
        await send.put(_msg("T", b"x", 0, level=3))  # 10 s

    try:
        asyncio.run(main())
        before = store.queues[(SCHEDULE_TOPIC, 2)].get(0)
        # the dispatcher (slave replication, crash recovery) derives the same time from the record
        rec = store.look_message_by_offset(before[0])
        assert store.dispatcher.tags_code(rec) == before[2] == 4_010_000
    finally:
        store.shutdown()


def test_rebuild_and_crash_recovery_restore_delivery_times(tmp_path):
    clock = Clock(6_000_000)
    store, send, _ = _open(tmp_path, clock)

    async def put():
        await send.put(_msg("T", b"x", 0, level=2))  # 5 s

    asyncio.run(put())
    assert store.queues[(SCHEDULE_TOPIC, 1)].get(0)[2] == 6_005_000
    store.rebuild_consume_queues()  # from the commit log alone
    assert store.queues[(SCHEDULE_TOPIC, 1)].get(0)[2] == 6_005_000
    store.flush_all()
    store.close_abruptly()  # as after kill -9: recovery re-dispatches past the checkpoint
    import shutil

    shutil.rmtree(tmp_path / "store" / "consumequeue")
    store = MessageStore.open(_config(tmp_path), clock_ms=clock)
    try:
        assert store.queues[(SCHEDULE_TOPIC, 1)].get(0)[2] == 6_005_000
    finally:
        store.shutdown()


def test_a_slave_does_not_deliver(tmp_path):
    clock = Clock(5_000_000)
    store, send, sched = _open(tmp_path, clock)

    async def main():
        await send.put(_msg("T", b"x", 0, level=1))
        store.role_state.change(BrokerRole.SLAVE, 1)
        clock.now_ms += 60_000
        assert await sched.deliver_due() == 0
        store.role_state.change(BrokerRole.ASYNC_MASTER, 0)  # promoted: delivers what is due
        assert await sched.deliver_due() == 1

    try:
        asyncio.run(main())
    finally:
        store.shutdown()


@pytest.mark.parametrize("spec", ["1s 5x", "1s -5s", "s", ""])
def test_bad_message_delay_level_is_a_config_error(tmp_path, spec):
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        _config(tmp_path, messageDelayLevel=spec)


def test_level_one_message_arrives_after_a_second_on_a_real_broker(start_broker, namesrv):
    broker = start_broker()

    async def main():
        producer = Producer("PG", [namesrv.addr])
        client = RemotingClient()
        try:
            sent_ms = int(time.time() * 1000)
            r = await producer.send("DelayTopic", b"one-second", properties={"DELAY": "1"})
            qid = r.queue.queue_id
            deadline = time.monotonic() + 30
            while True:
                req = RemotingCommand.request(
                    RequestCode.PULL_MESSAGE,
                    {
                        "consumerGroup": "CG",
                        "topic": "DelayTopic",
                        "queueId": qid,
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
                assert time.monotonic() < deadline, "delayed message never delivered"
                await asyncio.sleep(0.05)  # polling interval, not synchronisation
            (rec,) = decode_pull_body(resp.body, "pull")
            assert rec.body == b"one-second"
            assert rec.store_timestamp - sent_ms >= 1000
            assert "DELAY" not in rec.properties
        finally:
            await producer.close()
            await client.close()

    asyncio.run(main())
    assert broker.terminate() == 0
