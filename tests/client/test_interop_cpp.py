"""The real RocketMQ C++ client core (PyPI ``rocketmq`` wheel) reads our name server's route
and sends to a broker built on our remoting server."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("rocketmq.client")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import asyncio, json, threading
from broker.namesrv import NameServer
from broker.remoting.server import RemotingServer
from broker.remoting.codes import ResponseCode
from tests.client.fakes import register

seen, ready, ports, done = [], threading.Event(), {}, None

async def on_send(conn, req):
    seen.append({"code": req.code, "ext": req.ext_fields, "body": req.body.decode()})
    return req.make_response(ResponseCode.SUCCESS, ext_fields={
        "msgId": "7F00000100002A9F0000000000000000", "queueId": req.ext_fields["queueId"],
        "queueOffset": 41})

async def ok(conn, req):
    return req.make_response(ResponseCode.SUCCESS)

async def main():
    global done
    done = asyncio.Event()
    ns = NameServer(); await ns.server.start()
    b = RemotingServer({10: on_send, 310: on_send, 34: ok, 35: ok}); await b.start()
    await register(ns, b, "broker-a", {"TopicX": {"readQueueNums": 4, "writeQueueNums": 4}})
    ports["ns"] = ns.server.port
    ready.set()
    await asyncio.sleep(20)

threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
ready.wait(10)
from rocketmq.client import Message, Producer
p = Producer("PG_interop")
p.set_namesrv_addr(f"127.0.0.1:{ports['ns']}")
p.start()
m = Message("TopicX"); m.set_tags("TagA"); m.set_keys("K1"); m.set_body("hello")
r = p.send_sync(m)
out = {"status": int(r.status), "offset": r.offset, "seen": seen}
p.shutdown()
print("RESULT " + json.dumps(out), flush=True)
"""


def test_cpp_client_sends_through_our_route(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    lines = [x for x in proc.stdout.decode().splitlines() if x.startswith("RESULT ")]
    assert lines, proc.stderr.decode()[-2000:]
    out = json.loads(lines[0][len("RESULT ") :])
    assert out["status"] == 0 and out["offset"] == 41
    (sent,) = out["seen"]
    assert sent["body"] == "hello" and sent["ext"]["topic"] == "TopicX"
    assert "TAGS\x01TagA" in sent["ext"]["properties"]
