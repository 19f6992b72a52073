"""Auto-created topics on a real broker: each one appended to topics.json's change log (not a
rewrite of the file), registered with the name server as a delta, and none lost by kill -9."""

from __future__ import annotations

import asyncio
import json

from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.acl.helpers import send_v2
from tests.support.waiting import wait_for

N_TOPICS = 40


async def _route(client, ns_addr, topic):
    r = await client.invoke(ns_addr, RemotingCommand.request(105, {"topic": topic}))
    return json.loads(r.body) if r.code == ResponseCode.SUCCESS else None


def test_auto_created_topics_survive_kill_9_and_reach_the_name_server(namesrv, start_broker):
    broker = start_broker()
    names = [f"Auto{i}" for i in range(N_TOPICS)]

    async def send_all():
        client = RemotingClient()
        await wait_for(lambda: _route(client, namesrv.addr, "TBW102"), 15_000, what="TBW102")
        producer = Producer("PG", [namesrv.addr])
        for name in names:
            result = await producer.send(name, b"x")
            assert result.status == SendStatus.SEND_OK
        for name in names:  # each created topic was registered (a delta, seconds at most)
            await wait_for(lambda n=name: _route(client, namesrv.addr, n), 15_000, what=name)
        await producer.close()
        await client.close()

    asyncio.run(send_all())
    config_dir = broker.store_dir / "config"
    checkpoint = json.loads((config_dir / "topics.json").read_text())["topicConfigTable"]
    assert not set(names) <= set(checkpoint)  # not rewritten per topic: in the change log
    assert (config_dir / "topics.json.log").stat().st_size > 0
    broker.kill()  # SIGKILL: no compaction at shutdown

    again = start_broker()

    async def read_back():
        client = RemotingClient()
        req = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)
        resp = await client.invoke(again.addr, req)
        await client.close()
        return json.loads(resp.body)["topicConfigTable"]

    assert set(names) <= set(asyncio.run(read_back()))
    assert again.terminate() == 0  # a clean stop compacts: topics.json holds them all
    assert set(names) <= set(
        json.loads((config_dir / "topics.json").read_text())["topicConfigTable"]
    )
    log_text = (again.log_path).read_text()
    assert "replayed from its log" in log_text


def test_an_anonymous_client_auto_creates_at_most_its_share(namesrv, start_broker):
    """Issue 28 (others): anonymous clients had no topic cap (autoCreateTopicMaxPerClient)."""
    broker = start_broker(autoCreateTopicMaxPerClient=3)

    async def main():
        client = RemotingClient()
        try:
            for i in range(3):
                r = await client.invoke(broker.addr, send_v2(f"Capped{i}"))
                assert r.code == ResponseCode.SUCCESS, r.remark
            r = await client.invoke(broker.addr, send_v2("Capped3"))
            assert r.code == ResponseCode.TOPIC_NOT_EXIST, r.remark
            assert "autoCreateTopicMaxPerClient=3" in r.remark
            again = await client.invoke(broker.addr, send_v2("Capped0", b"more"))
            assert again.code == ResponseCode.SUCCESS  # what it made stays writable
            req = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)
            table = json.loads((await client.invoke(broker.addr, req)).body)["topicConfigTable"]
            assert "Capped3" not in table and "Capped2" in table
        finally:
            await client.close()

    asyncio.run(main())
