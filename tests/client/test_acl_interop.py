"""Real clients against an ACL-enabled name server and broker (real processes on 127.0.0.1):
ali-ons (the JavaScript RocketMQ client, which signs with accessKeyId / accessKeySecret) and our
Python producer and consumer produce and consume with an application account; a wrong secret,
no signature, or a topic outside the account's permissions is refused and stores nothing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from broker.acl.signing import AclSigner
from broker.client.consumer import Consumer
from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import HaproofError
from tests.acl.acl_files import (
    ADMIN_AK,
    ADMIN_SK,
    GROUP,
    TOPIC,
    USER_AK,
    USER_SK,
    admin,
    user,
    write_acl,
)
from tests.client.test_interop_js import JS_DIR, PROCESS_TIMEOUT_S, _node
from tools.localcluster import LocalProcess, free_port, start_broker, write_broker_conf

N = 30


def _namesrv(tmp_path, name: str, *extra: str) -> LocalProcess:
    port = free_port()
    return LocalProcess.start(
        name,
        ["namesrv", "--host", "127.0.0.1", "--listen-port", str(port), *extra],
        port,
        tmp_path / f"{name}.log",
    )


def _start_cluster(tmp_path, open_namesrv: LocalProcess | None = None):
    """(ACL name server, ACL broker); the broker also registers with ``open_namesrv``."""
    acl = write_acl(tmp_path)
    ns = _namesrv(tmp_path, "namesrv", "--acl-file", str(acl))
    bport = free_port()
    conf = write_broker_conf(
        tmp_path / "broker-a.conf",
        {
            "brokerName": "broker-a",
            "storePathRootDir": tmp_path / "store-a",
            "listenPort": bport,
            "haListenPort": free_port(),
            "namesrvAddr": ns.addr + (f";{open_namesrv.addr}" if open_namesrv else ""),
            "mappedFileSizeCommitLog": 4 * 1024 * 1024,
            "aclEnable": "true",
            "aclFile": acl,
            "accessKey": ADMIN_AK,
            "secretKey": ADMIN_SK,
        },
    )
    return ns, start_broker("broker-a", conf, bport, tmp_path)


def _invoke(addr: str, req: RemotingCommand, signer) -> RemotingCommand:
    async def main():
        client = RemotingClient(rpc_hook=signer)
        try:
            return await client.invoke(addr, req, 5000)
        finally:
            await client.close()

    return asyncio.run(main())


def _create(addr: str, topic: str) -> None:
    req = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
    )
    resp = _invoke(addr, req, admin())
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def _stored(addr: str, topic: str) -> int:
    total = 0
    for qid in range(4):
        req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": qid})
        resp = _invoke(addr, req, admin())
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        total += resp.int_field("offset")
    return total


def _js(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_node(), script, *args], cwd=JS_DIR, capture_output=True, timeout=PROCESS_TIMEOUT_S
    )


def _lines(proc: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]


def test_ali_ons_produces_and_consumes_with_an_account_and_is_refused_with_a_wrong_secret(
    tmp_path,
):
    _node()
    # a second name server without ACL hands out routes to anyone: the broker itself must refuse
    open_ns = _namesrv(tmp_path, "open-namesrv")
    ns, broker = _start_cluster(tmp_path, open_ns)
    try:
        _create(broker.addr, TOPIC)
        _create(broker.addr, "OtherTopic")
        keys = ("--access-key", USER_AK, "--secret-key", USER_SK)
        prod = _js("producer.js", "--namesrv", ns.addr, "--topic", TOPIC, "--count", str(N), *keys)
        assert prod.returncode == 0, prod.stderr.decode()[-3000:]
        sent = [x for x in _lines(prod) if "i" in x]
        assert len(sent) == N and {x["status"] for x in sent} == {"SEND_OK"}
        assert _stored(broker.addr, TOPIC) == N

        cons = _js(
            "consumer.js",
            *("--namesrv", ns.addr, "--topic", TOPIC, "--group", GROUP, "--expect", str(N)),
            *keys,
        )
        assert cons.returncode == 0, cons.stderr.decode()[-3000:]
        got = [x for x in _lines(cons) if "msgId" in x]
        assert {x["msgId"] for x in got} == {x["msgId"] for x in sent}

        wrong = ("--access-key", USER_AK, "--secret-key", "wrong-secret")
        for namesrv, args in (
            (ns.addr, ("--topic", TOPIC, *wrong)),
            (open_ns.addr, ("--topic", TOPIC, *wrong)),  # routed: the broker refuses the send
            (ns.addr, ("--topic", TOPIC, "--access-key", "noSuchUser", "--secret-key", USER_SK)),
            (ns.addr, ("--topic", "OtherTopic", *keys)),  # no PUB on this topic
        ):
            bad = _js("producer.js", "--namesrv", namesrv, "--count", "3", *args)
            assert bad.returncode != 0, bad.stdout.decode()
            assert not [x for x in _lines(bad) if "i" in x], "a refused producer sent something"
        assert _stored(broker.addr, TOPIC) == N and _stored(broker.addr, "OtherTopic") == 0
        broker_log, ns_log = broker.log_path.read_text(), ns.log_path.read_text()
        assert "code 310 from 127.0.0.1" in broker_log and "signature mismatch" in broker_log
        assert "no PUB on topic 'OtherTopic'" in broker_log
        assert "code 105" in ns_log and "no ACL account for accessKey 'noSuchUser'" in ns_log
    finally:
        assert broker.stop() == 0, broker.log_path.read_text()[-3000:]
        ns.stop()
        open_ns.stop()


def test_our_producer_and_consumer_sign_and_unsigned_ones_are_refused(tmp_path):
    ns, broker = _start_cluster(tmp_path)
    try:
        _create(broker.addr, TOPIC)

        async def main():
            p = Producer("PG_acl", [ns.addr], rpc_hook=user())
            try:
                for i in range(5):
                    res = await p.send(TOPIC, f"m{i}".encode())
                    assert res.status is SendStatus.SEND_OK
            finally:
                await p.close()
            for hook in (None, AclSigner(USER_AK, "wrong-secret")):
                p = Producer("PG_acl", [ns.addr], rpc_hook=hook, retry_times=0)
                try:
                    with pytest.raises(HaproofError):
                        await p.send(TOPIC, b"nope")
                finally:
                    await p.close()
            c = Consumer(GROUP, [ns.addr], TOPIC, persist_interval_ms=0, rpc_hook=user())
            got = []
            deadline = time.monotonic() + 60
            try:
                while len(got) < 5:
                    assert time.monotonic() < deadline, f"consumer got {len(got)} of 5"
                    got += await c.poll()
            finally:
                await c.close()
            assert sorted(r.body for r in got) == [f"m{i}".encode() for i in range(5)]

        asyncio.run(main())
        assert _stored(broker.addr, TOPIC) == 5
    finally:
        assert broker.stop() == 0, broker.log_path.read_text()[-3000:]
        ns.stop()


CPP_SCRIPT = r"""
import json, sys
from rocketmq.client import Message, Producer
ns, topic, ak, sk = sys.argv[1:5]
p = Producer("PG_cpp_acl")
p.set_namesrv_addr(ns)
p.set_session_credentials(ak, sk, "ALIYUN")
p.start()
out = []
for i in range(3):
    m = Message(topic); m.set_tags("TagA"); m.set_keys(f"K{i}"); m.set_body(f"cpp-{i}")
    try:
        r = p.send_sync(m)
        out.append({"status": int(r.status), "offset": r.offset})
    except Exception as exc:
        out.append({"error": type(exc).__name__})
p.shutdown()
print("RESULT " + json.dumps(out), flush=True)
"""


def test_rocketmq_cpp_client_signs_with_session_credentials(tmp_path):
    pytest.importorskip("rocketmq.client")
    ns, broker = _start_cluster(tmp_path)
    try:
        _create(broker.addr, TOPIC)

        def run(secret: str) -> list[dict]:
            env = {**os.environ, "HOME": str(tmp_path)}
            proc = subprocess.run(
                [sys.executable, "-c", CPP_SCRIPT, ns.addr, TOPIC, USER_AK, secret],
                capture_output=True,
                timeout=120,
                env=env,
            )
            lines = [x for x in proc.stdout.decode().splitlines() if x.startswith("RESULT ")]
            assert lines, proc.stderr.decode()[-2000:]
            return json.loads(lines[0][len("RESULT ") :])

        good = run(USER_SK)
        assert [x.get("status") for x in good] == [0, 0, 0], good
        assert _stored(broker.addr, TOPIC) == 3
        bad = run("wrong-secret")
        assert all("error" in x for x in bad), bad
        assert _stored(broker.addr, TOPIC) == 3
    finally:
        assert broker.stop() == 0, broker.log_path.read_text()[-3000:]
        ns.stop()
