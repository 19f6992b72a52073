"""A real ``haproof namesrv`` + ``haproof broker -c`` pair on free ports."""

import asyncio
import json

from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.reader import decode_record
from tests.support.waiting import wait_for


async def _poll_route(client, ns_addr, topic, deadline_s=15.0):
    async def route():
        r = await client.invoke(ns_addr, RemotingCommand.request(105, {"topic": topic}))
        return json.loads(r.body) if r.code == ResponseCode.SUCCESS else None

    return await wait_for(route, deadline_s * 1000, what=f"a route for {topic}", every_ms=50)


def test_broker_registers_sends_pulls_and_shuts_down_cleanly(namesrv, start_broker):
    broker = start_broker()

    async def main():
        client = RemotingClient()
        route = await _poll_route(client, namesrv.addr, "TBW102")
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": broker.addr}
        assert route["queueDatas"][0]["perm"] == 7

        producer = Producer("PG", [namesrv.addr])
        results = [
            await producer.send("TopicN", f"m{i}".encode(), tags="TagA", keys=f"k{i}")
            for i in range(10)
        ]
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        # auto-created and re-registered: the topic's own route appears
        route = await _poll_route(client, namesrv.addr, "TopicN")
        assert route["queueDatas"][0]["writeQueueNums"] == 4
        r0 = results[0]
        req = RemotingCommand.request(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "CG",
                "topic": "TopicN",
                "queueId": r0.queue.queue_id,
                "queueOffset": 0,
                "maxMsgNums": 32,
                "sysFlag": 0,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
            },
        )
        resp = await client.invoke(broker.addr, req)
        assert resp.code == ResponseCode.SUCCESS
        rec = decode_record(resp.body, 0)
        assert rec.body == b"m0" and rec.properties["TAGS"] == "TagA"
        same_q = [r for r in results if r.queue.queue_id == r0.queue.queue_id]
        assert resp.int_field("nextBeginOffset") == len(same_q)
        assert resp.int_field("maxOffset") == len(same_q)
        await producer.close()
        await client.close()

    asyncio.run(main())
    assert broker.terminate() == 0
    assert not (broker.store_dir / "abort").exists()
    topics = json.loads((broker.store_dir / "config" / "topics.json").read_text())
    assert set(topics["topicConfigTable"]) == {"TBW102", "TopicN"}


def test_bad_config_and_locked_store_exit_2_with_a_clear_message(tmp_path, start_broker):
    import subprocess
    import sys

    from tests.node.conftest import ROOT, free_port, write_conf

    missing = subprocess.run(
        [sys.executable, "-m", "broker.cli", "broker", "-c", str(tmp_path / "nope.conf")],
        cwd=ROOT,
        capture_output=True,
        timeout=30,
    )
    assert missing.returncode == 2 and b"nope.conf" in missing.stderr
    bad = tmp_path / "bad.conf"
    bad.write_text("brokerRole=SLAVE\nbrokerId=0\n")
    r = subprocess.run(
        [sys.executable, "-m", "broker.cli", "broker", "-c", str(bad)],
        cwd=ROOT,
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 2 and b"brokerId" in r.stderr
    first = start_broker()
    conf = write_conf(tmp_path / "second.conf", str(first.store_dir), free_port(), "")
    r = subprocess.run(
        [sys.executable, "-m", "broker.cli", "broker", "-c", conf],
        cwd=ROOT,
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 2 and b"in use by another process" in r.stderr
    assert first.terminate() == 0
