"""Failover with real processes on 127.0.0.1: SYNC_MASTER + SYNC_FLUSH, kill -9 the master,
``haproof admin promote`` the slave, every acknowledged message readable on the new master byte
for byte, the old master rejoins as a slave and the two logs are identical again."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys

from broker.admin import ha_status
from broker.client.producer import Producer, SendStatus
from broker.client.routes import fetch_route
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.model import Record
from contracts.record.reader import decode_record
from tests.conftest import wait_until
from tests.support.cluster import conf_factory
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "FailoverTopic"


# A shared machine: generous deadlines.
_wait = functools.partial(wait_until, timeout_s=60.0)


_conf = conf_factory(
    flushDiskType="SYNC_FLUSH", haSendHeartbeatInterval=500, slaveSyncIntervalMs=300
)


async def _send(namesrv: str, n: int, label: str) -> list:
    producer = Producer("PG", [namesrv], retry_times=0)
    acked = []
    try:
        for i in range(n):
            body = f"{label}-{i}-".encode() * 20
            try:
                res = await producer.send(TOPIC, body, keys=f"{label}-{i}")
            except Exception:  # noqa: BLE001 - the master may die under us: not acknowledged
                continue
            if res.status is SendStatus.SEND_OK:
                acked.append((res, body))
    finally:
        await producer.close()
    return acked


async def _pull_one(client, addr: str, queue_id: int, offset: int) -> Record:
    req = RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "check",
            "topic": TOPIC,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": 1,
            "sysFlag": 0,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
        },
    )
    resp = await client.invoke(addr, req, 5000)
    assert resp.code == ResponseCode.SUCCESS, (queue_id, offset, resp.code, resp.remark)
    return decode_record(resp.body, 0)


def _log(store_dir) -> bytes:
    files = sorted((store_dir / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files)


def test_kill_master_promote_slave_no_acknowledged_message_lost(tmp_path):
    ns = start_namesrv(tmp_path)
    procs = [ns]
    try:
        ports = {n: (free_port(), free_port()) for n in ("a", "b")}
        (a_port, a_ha), (b_port, b_ha) = ports["a"], ports["b"]
        a = start_broker(
            "a", _conf(tmp_path, "a", 0, "SYNC_MASTER", a_port, a_ha, ns.addr), a_port, tmp_path
        )
        b = start_broker(
            "b",
            _conf(
                tmp_path,
                "b",
                1,
                "SLAVE",
                b_port,
                b_ha,
                ns.addr,
                haMasterAddress=f"127.0.0.1:{a_ha}",
            ),
            b_port,
            tmp_path,
        )
        procs += [a, b]
        _wait(lambda: asyncio.run(ha_status([a.addr]))[0].get("slaves"), what="b connected")
        acked = asyncio.run(_send(ns.addr, 300, "before"))
        assert len(acked) == 300, "a SYNC_MASTER with a live slave acknowledges every send"

        async def slave_knows_topic():
            client = RemotingClient()
            try:
                req = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)
                resp = await client.invoke(b.addr, req, 5000)
                return TOPIC in resp.body.decode()
            finally:
                await client.close()

        # SlaveSynchronize has copied the topic to the slave (it keeps copying every 300 ms).
        _wait(lambda: asyncio.run(slave_knows_topic()), what="topic synced to the slave")
        a.kill()  # -9: no flush, no goodbye
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "broker.cli",
                "admin",
                "promote",
                "--broker-name",
                "broker-a",
                "--node",
                "b",
                "--namesrv",
                ns.addr,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        assert "b (127.0.0.1:" in res.stdout and "epoch 2" in res.stdout

        async def master_now():
            client = RemotingClient()
            try:
                route = await fetch_route(client, [ns.addr], TOPIC)
                return route.master_addr("broker-a")
            finally:
                await client.close()

        _wait(lambda: asyncio.run(master_now()) == b.addr, what="name server routes to b")

        async def check_all():
            client = RemotingClient()
            try:
                for sent, body in acked:
                    rec = await _pull_one(client, b.addr, sent.queue.queue_id, sent.queue_offset)
                    assert rec.body == body, (sent.queue, sent.queue_offset)
                    assert rec.properties["KEYS"] == body.split(b"-")[0].decode() + "-" + (
                        body.split(b"-")[1].decode()
                    )
            finally:
                await client.close()

        asyncio.run(check_all())

        # The old master comes back as b's slave: same store, same node name.
        a2 = start_broker(
            "a",
            _conf(
                tmp_path,
                "a",
                1,
                "SLAVE",
                a_port,
                a_ha,
                ns.addr,
                haMasterAddress=f"127.0.0.1:{b_ha}",
            ),
            a_port,
            tmp_path,
        )
        procs.append(a2)
        _wait(lambda: asyncio.run(ha_status([b.addr]))[0].get("slaves"), what="a2 connected")
        more = asyncio.run(_send(ns.addr, 50, "after"))
        assert len(more) == 50  # b is SYNC_MASTER and a acknowledges again
        status = subprocess.run(
            [
                sys.executable,
                "-m",
                "broker.cli",
                "admin",
                "haStatus",
                "--namesrv",
                ns.addr,
                "--broker-name",
                "broker-a",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        a2.stop()
        b.stop()
        log_a, log_b = _log(tmp_path / "store-a"), _log(tmp_path / "store-b")
        end = len(log_b.rstrip(b"\0"))
        assert log_a[:end] == log_b[:end]
        assert "truncating the commit log" in (tmp_path / "a.log").read_text() or (
            len(log_a.rstrip(b"\0")) == end
        )
    finally:
        for p in procs:
            p.kill()
