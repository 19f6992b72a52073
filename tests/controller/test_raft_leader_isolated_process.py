"""A Raft leader cut off from its majority stops vouching for the master's lease, with real
processes on 127.0.0.1: three controllers on PySyncObj's Raft and a master in controller mode.
The two followers are stopped (SIGSTOP: their connections stay open and carry nothing, as in a
partition that leaves the master with the old leader); the leader, alive and still answering
the master's heartbeats, stops saying it leads within its fallback
(``jRaftLeaderFallbackTimeoutMs``), and the master refuses sends (its lease ended) before any
other controller could have elected its successor (the heartbeat timeout after the last
heartbeat that reached them), and goes on refusing while the majority is away. On main the
leader said it led for PySyncObj's 30 s and renewed the lease all along (RocketMQ #7017).

The lease here (4 s) outlasts a heartbeat round: each round waits the remoting timeout (3 s) on
the stopped controllers, and a lease shorter than that (``BROKER_TIMING``'s 2 s) ends between
rounds whoever leads, which would hide the fault (main then fenced too). Production's defaults
(8 s lease, 1 s rounds) are of this kind."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from broker.client.producer import Producer, SendStatus
from broker.client.routes import MessageQueue
from broker.remoting.codes import RequestCode
from contracts.errors import RemotingError
from tests.support.controller_cluster import BROKER_NAME, BROKER_TIMING, ControllerCluster
from tests.support.waiting import wait_for

TOPIC = "IsolatedLeaderTopic"
# tests/controller/support.py's jRaftElectionTimeoutMs (RocketMQ's default; at 500 ms, the
# 250 ms fallback deposed leaders on a loaded CI machine)
ELECTION_MS = 1000
FALLBACK_MS = ELECTION_MS // 2  # the default: half of it
LEASE_MS, TIMEOUT_MS = 4000, 5000  # a lease longer than a round, at most 80 % of the timeout
BEAT_MS = BROKER_TIMING["brokerHeartbeatInterval"]
PROBE_MS = 100  # the pace of the probes that the fence holds
SLACK_MS = 600  # PySyncObj's 50 ms tick and scheduling on 2 busy cores


def test_a_leader_without_its_majority_stops_renewing_the_masters_lease(tmp_path):
    steps = asyncio.run(_isolate_the_leader(tmp_path))
    print("after the followers stopped: " + ", ".join(f"{k} {v:.0f} ms" for k, v in steps.items()))


async def _send(producer: Producer, addr: str, label: str) -> str | None:
    """One send to ``addr`` itself; None when written (SLAVE_NOT_AVAILABLE too: a master
    alone in its group writes without a slave), else why not."""
    mq = MessageQueue(TOPIC, BROKER_NAME, 0)
    props = {"UNIQ_KEY": label, "KEYS": label}
    try:
        res = await producer._send_once(addr, mq, label.encode() * 10, props, 0)
    except RemotingError as exc:
        return str(exc)
    taken = (SendStatus.SEND_OK, SendStatus.SLAVE_NOT_AVAILABLE)
    return None if res.status in taken else str(res.status)


async def _leads(cluster: ControllerCluster, addr: str) -> bool | None:
    resp = await cluster.invoke(addr, RequestCode.CONTROLLER_GET_METADATA_INFO, timeout_ms=500)
    return None if resp is None else resp.ext_fields.get("isLeader") == "true"


async def _isolate_the_leader(tmp_path) -> dict[str, float]:
    cluster = await ControllerCluster.start(
        tmp_path,
        controllers=3,
        nodes=("a",),
        controllerLeaseMills=LEASE_MS,
        controllerHeartBeatTimeoutMills=TIMEOUT_MS,
    )
    producer = Producer("PG", [cluster.ns.addr], retry_times=0)
    stopped: list[int] = []
    try:
        master, _ = await cluster.wait_master()
        leader = await wait_for(cluster.controller_leader, 30_000, what="a controller leader")
        n = 0

        async def accepted():
            nonlocal n
            n += 1
            return await _send(producer, master, f"m{n}") is None

        await wait_for(accepted, 30_000, what="the master taking sends", every_ms=50)
        stopped = [
            c.proc.pid
            for addr, c in zip(cluster.ctl_addrs, cluster.controllers, strict=True)
            if addr != leader
        ]
        start = time.monotonic() * 1000
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)

        async def deposed():
            return await _leads(cluster, leader) is False

        await wait_for(
            deposed, FALLBACK_MS + SLACK_MS, what="the isolated leader stepping down", every_ms=20
        )
        stepped_down = time.monotonic() * 1000 - start

        async def refused():
            nonlocal n
            n += 1
            return await _send(producer, master, f"m{n}")

        why = await wait_for(refused, 10_000, what="the master refusing sends", every_ms=20)
        fenced = time.monotonic() * 1000 - start
        assert "lease" in why, why
        # the stopped controllers last heard the master within a heartbeat before the stop:
        # none of them could elect another master before TIMEOUT_MS - BEAT_MS after it
        assert fenced < TIMEOUT_MS - BEAT_MS, (stepped_down, fenced)
        # and it stays fenced while the majority is away (the old leader goes on answering)
        # probes 100 ms apart until start + TIMEOUT_MS + LEASE_MS (a check that something
        # holds throughout, not a wait for something to happen)
        left_ms = start + TIMEOUT_MS + LEASE_MS - time.monotonic() * 1000
        for _ in range(max(1, int(left_ms // PROBE_MS))):
            n += 1
            assert await _send(producer, master, f"m{n}") is not None, "writes resumed"
            assert await _leads(cluster, leader) is not True, "the isolated leader leads again"
            await asyncio.sleep(PROBE_MS / 1000)  # the pace of the probes
        return {"stepped down": stepped_down, "fenced": fenced}
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        await producer.close()
        await cluster.close()
