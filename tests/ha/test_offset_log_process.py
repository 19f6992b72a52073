"""Committed offsets through the commit log, with real processes (Jepsen's non-monotonic check
from the client side): a SYNC_MASTER answers commits, is killed -9 right after some of them at
random points, its slave is promoted (``haproof admin promote``), the old master rejoins as the
new master's slave; over 20 rounds QUERY_CONSUMER_OFFSET on each new master never answers less
than any answer given before. With ``offsetCommitThroughLog=false`` (RocketMQ's table copied
every slaveSyncIntervalMs) the same rounds show regressions."""

from __future__ import annotations

import asyncio
import functools
import random
import subprocess
import sys

from broker.admin import ha_status
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.conftest import wait_until
from tests.ha.test_offsets_monotone import _fill_queues
from tests.support.cluster import conf_factory
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC, GROUP = "OffsetTopic", "CG"  # (_fill_queues sends to TOPIC)
_wait = functools.partial(wait_until, timeout_s=60.0)


async def _call(addr: str, code: RequestCode, fields: dict) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields), 5000)
    finally:
        await client.close()


def _commit(addr: str, queue_id: int, offset: int) -> bool:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset}
    resp = asyncio.run(_call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, fields))
    return resp.code == ResponseCode.SUCCESS


def _query(addr: str, queue_id: int) -> int:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id}
    resp = asyncio.run(_call(addr, RequestCode.QUERY_CONSUMER_OFFSET, fields))
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1


def _promote(ns: str, node: str) -> None:
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
            node,
            "--namesrv",
            ns,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _rounds(tmp_path, through_log: bool, rounds: int) -> list[tuple]:
    """The regressions seen: (round, queue, highest answered before, answer after)."""
    conf = conf_factory(
        slaveSyncIntervalMs=500,
        haSendHeartbeatInterval=500,
        offsetCommitThroughLog=str(through_log).lower(),
    )
    ns = start_namesrv(tmp_path)
    procs = [ns]
    ports = {n: (free_port(), free_port()) for n in ("a", "b")}
    rng = random.Random(29)
    try:
        master = start_broker(
            "a",
            conf(tmp_path, "a", 0, "SYNC_MASTER", *ports["a"], ns.addr),
            ports["a"][0],
            tmp_path,
        )
        slave = start_broker(
            "b",
            conf(
                tmp_path,
                "b",
                1,
                "SLAVE",
                *ports["b"],
                ns.addr,
                haMasterAddress=f"127.0.0.1:{ports['a'][1]}",
            ),
            ports["b"][0],
            tmp_path,
        )
        procs += [master, slave]
        _wait(lambda: asyncio.run(ha_status([master.addr]))[0].get("slaves"), what="b connected")
        asyncio.run(_fill_queues(ns.addr, master.addr, 200))
        highest = dict.fromkeys(range(4), 0)
        regressions = []
        for r in range(rounds):
            for _ in range(rng.randint(1, 6)):
                q = rng.randrange(4)
                if _commit(master.addr, q, highest[q] + rng.randint(1, 3)):
                    highest[q] = max(highest[q], _query(master.addr, q))
            master.kill()  # -9, right after the last commit was answered
            _promote(ns.addr, slave.name)
            for q in range(4):
                got = _query(slave.addr, q)
                if got < highest[q]:
                    regressions.append((r, q, highest[q], got))
                highest[q] = max(highest[q], got)
            old = master.name
            rejoined = start_broker(
                old,
                conf(
                    tmp_path,
                    old,
                    1,
                    "SLAVE",
                    *ports[old],
                    ns.addr,
                    haMasterAddress=f"127.0.0.1:{ports[slave.name][1]}",
                ),
                ports[old][0],
                tmp_path,
            )
            procs.append(rejoined)
            _wait(
                lambda s=slave: asyncio.run(ha_status([s.addr]))[0].get("slaves"),
                what=f"{old} rejoined",
            )
            master, slave = slave, rejoined
        return regressions
    finally:
        for p in procs:
            p.kill()


def test_query_never_answers_less_after_kill_and_promote(tmp_path) -> None:
    assert _rounds(tmp_path, through_log=True, rounds=20) == []


def test_without_the_log_the_same_rounds_regress(tmp_path) -> None:
    regressions = _rounds(tmp_path, through_log=False, rounds=4)
    assert regressions, "RocketMQ's copied table should have lost a commit at a kill -9"
