"""End to end through real processes: our asyncio producer → namesrv → broker → our consumer,
committed offsets reaching the broker; then the real RocketMQ C++ client (rocketmq 0.4.4)
producing to the broker and consuming from it."""

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from broker.client.consumer import Consumer
from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.node.conftest import ROOT
from tests.support.waiting import wait_for

N = 1000


async def _consume_all(consumer, want: int, deadline_s: float = 30.0):
    got = []
    deadline = time.monotonic() + deadline_s
    while len(got) < want:
        assert time.monotonic() < deadline, f"consumed {len(got)} of {want}"
        got += await consumer.poll()
    return got


def test_python_producer_consumer_through_broker_process(namesrv, start_broker):
    broker = start_broker()

    async def main():
        producer = Producer("PG_e2e", [namesrv.addr])
        sent = {}
        for i in range(N):
            r = await producer.send("TopicE2E", b"body-%d" % i, tags=f"T{i % 3}", keys=f"K{i}")
            assert r.status is SendStatus.SEND_OK
            sent[r.msg_id] = i
        await producer.close()

        consumer = Consumer("CG_e2e", [namesrv.addr], "TopicE2E", persist_interval_ms=100)
        got = await _consume_all(consumer, N)
        assert len(got) == N
        by_body = {r.body: r for r in got}
        assert set(by_body) == {b"body-%d" % i for i in range(N)}
        for i in (0, 1, 500, 999):
            rec = by_body[b"body-%d" % i]
            assert rec.properties["TAGS"] == f"T{i % 3}" and rec.properties["KEYS"] == f"K{i}"
        assert {r.properties["UNIQ_KEY"] for r in got} == set(sent)
        await consumer.close()  # persists offsets with UPDATE_CONSUMER_OFFSET

        client = RemotingClient()

        async def committed_all() -> bool:
            total = 0
            for qid in range(4):
                q = {"consumerGroup": "CG_e2e", "topic": "TopicE2E", "queueId": qid}
                r = await client.invoke(broker.addr, RemotingCommand.request(14, q))
                assert r.code == ResponseCode.SUCCESS
                mx = await client.invoke(
                    broker.addr, RemotingCommand.request(30, {"topic": "TopicE2E", "queueId": qid})
                )
                assert r.int_field("offset") <= mx.int_field("offset")
                total += r.int_field("offset")
            return total == N

        await wait_for(committed_all, 10_000, what=f"committed offsets to sum to {N}", every_ms=50)
        await client.close()

        # a second group with a tag filter gets exactly its share
        tagged = Consumer("CG_tag", [namesrv.addr], "TopicE2E", sub_expression="T1")
        got = []
        deadline = time.monotonic() + 20
        want = len([i for i in range(N) if i % 3 == 1])
        while len(got) < want:
            assert time.monotonic() < deadline
            got += [r for r in await tagged.poll() if r.properties.get("TAGS") == "T1"]
        assert len(got) == want
        await tagged.close()

    asyncio.run(main())
    assert broker.terminate() == 0
    doc = json.loads((broker.store_dir / "config" / "consumerOffset.json").read_text())
    assert sum(doc["offsetTable"]["TopicE2E@CG_e2e"].values()) == N


CPP_SCRIPT = r"""
import json, sys, threading, time
from rocketmq.client import Message, Producer, PushConsumer
ns, n = sys.argv[1], int(sys.argv[2])
p = Producer("PG_cpp")
p.set_namesrv_addr(ns)
p.start()
statuses, offsets = [], []
for i in range(n):
    m = Message("TopicCpp"); m.set_tags("TagC"); m.set_keys("CK%d" % i)
    m.set_body("cpp-%d" % i)
    r = p.send_sync(m)
    statuses.append(int(r.status)); offsets.append(r.offset)
p.shutdown()
seen, lock = set(), threading.Lock()
def on_msg(msg):
    with lock:
        seen.add(msg.body.decode() if isinstance(msg.body, bytes) else msg.body)
c = PushConsumer("CG_cpp")
c.set_namesrv_addr(ns)
c.subscribe("TopicCpp", on_msg)
c.start()
deadline = time.monotonic() + 40
while len(seen) < n and time.monotonic() < deadline:
    time.sleep(0.1)
c.shutdown()
print("RESULT " + json.dumps({"statuses": statuses, "offsets": offsets,
                              "consumed": sorted(seen)}), flush=True)
"""


def test_cpp_client_produces_and_push_consumes(namesrv, start_broker, tmp_path):
    pytest.importorskip("rocketmq.client")
    broker = start_broker()
    n = 20
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", CPP_SCRIPT, namesrv.addr, str(n)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=90,
    )
    lines = [x for x in proc.stdout.decode().splitlines() if x.startswith("RESULT ")]
    assert lines, proc.stderr.decode()[-2000:] + broker.log_path.read_text()[-2000:]
    out = json.loads(lines[0][len("RESULT ") :])
    assert out["statuses"] == [0] * n  # SEND_OK
    assert out["consumed"] == sorted(f"cpp-{i}" for i in range(n))

    async def check():
        # the broker stored them with their tags and keys (our consumer reads them back)
        consumer = Consumer("CG_py", [namesrv.addr], "TopicCpp")
        got = await _consume_all(consumer, n)
        assert sorted(r.body.decode() for r in got) == sorted(f"cpp-{i}" for i in range(n))
        assert {r.properties["TAGS"] for r in got} == {"TagC"}
        await consumer.close()
        client = RemotingClient()
        r = await client.invoke(
            broker.addr, RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET)
        )
        await client.close()
        return json.loads(r.body)["offsetTable"]

    table = asyncio.run(check())
    assert sum(table.get("TopicCpp@CG_cpp", {}).values()) == n
    assert broker.terminate() == 0
