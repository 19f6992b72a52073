"""Real controller processes on 127.0.0.1: standalone with its journal (kill -9 keeps the
state), embedded in the name server, and a group of three on PySyncObj's Raft."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.clock import SYSTEM_CLOCK
from broker.ha.controller_client import ClientConfig
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode as Q
from broker.remoting.codes import ResponseCode as RC
from tests.conftest import wait_until
from tests.controller.inproc import FakeNode, fake_node_client
from tests.controller.support import (
    B,
    C,
    Proc,
    beat,
    call,
    join,
    replica_info,
    start_controller,
    start_raft_controllers,
    wait_answering,
)
from tests.support.waiting import wait_for
from tools.localcluster import free_port


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def test_scripted_brokers_elect_alter_and_fail_over_then_kill9_keeps_the_state(tmp_path, procs):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    procs.append(start_controller(tmp_path, "c0", port))
    wait_answering(addr)
    for expected in (1, 2, 3):
        assert join(addr, expected) == expected
    for bid in (1, 2, 3):
        assert beat(addr, bid, 0, 100 * bid, timeout_ms=60_000 if bid != 1 else 1500) == 0
    code, hdr, body = call(
        addr, Q.CONTROLLER_ELECT_MASTER, {"clusterName": C, "brokerName": B, "brokerId": 1}
    )
    assert code == RC.SUCCESS and int(hdr["masterBrokerId"]) == 3  # longest log, not the asker
    assert body["syncStateSet"] == [3] and int(hdr["masterEpoch"]) == 1
    # the master widens its SyncStateSet; a stale epoch is fenced
    fields = {"brokerName": B, "masterBrokerId": 3, "masterEpoch": 1}
    code, hdr, body = call(
        addr,
        Q.CONTROLLER_ALTER_SYNC_STATE_SET,
        fields,
        {"syncStateSet": [2, 3], "syncStateSetEpoch": 1},
    )
    assert code == RC.SUCCESS and int(hdr["newSyncStateSetEpoch"]) == 2
    assert call(
        addr,
        Q.CONTROLLER_ALTER_SYNC_STATE_SET,
        fields,
        {"syncStateSet": [1, 2, 3], "syncStateSetEpoch": 1},
    )[0] == (RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH)
    assert (
        call(addr, Q.CONTROLLER_ELECT_MASTER, {"clusterName": C, "brokerName": B, "brokerId": 2})[0]
        == RC.CONTROLLER_MASTER_STILL_EXIST
    )
    # the master (3) stops heartbeating: the controller elects 2 (in the set) by itself
    beat(addr, 3, 0, 300, timeout_ms=500)
    wait_until(
        lambda: int(replica_info(addr)[1].get("masterBrokerId") or 0) == 2,
        15,
        "controller-triggered election of 2",
        every_s=0.1,
    )
    assert int(replica_info(addr)[1]["masterEpoch"]) == 2
    code, _, data = call(addr, Q.CONTROLLER_GET_SYNC_STATE_DATA, body=[B])
    row = data["replicasInfoTable"][B]
    assert [r["brokerId"] for r in row["inSyncReplicas"]] == [2]
    alive = {r["brokerId"]: r["alive"] for r in row["notInSyncReplicas"]}
    assert sorted(alive) == [1, 3] and alive[3] is False
    # kill -9 and restart: the journal keeps every change
    before = replica_info(addr)
    procs[0].kill9()
    procs.append(start_controller(tmp_path, "c0", port))
    wait_answering(addr)
    assert replica_info(addr) == before
    code, hdr, _ = call(addr, Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B})
    assert int(hdr["nextBrokerId"]) == 4
    # a taken id with another check code is refused; bad input is answered, not crashed on
    assert call(
        addr,
        Q.CONTROLLER_APPLY_BROKER_ID,
        {
            "clusterName": C,
            "brokerName": B,
            "appliedBrokerId": 2,
            "registerCheckCode": "127.0.0.1:1;9",
        },
    )[0] == (RC.CONTROLLER_BROKER_ID_INVALID)
    assert call(addr, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "../x"})[0] == (
        RC.CONTROLLER_INVALID_REQUEST
    )
    never_expires = {
        "clusterName": C,
        "brokerName": B,
        "brokerAddr": "127.0.0.1:1",
        "brokerId": 9,
        "heartbeatTimeoutMills": 2**62,
    }
    assert call(addr, Q.BROKER_HEARTBEAT, never_expires)[0] == RC.CONTROLLER_INVALID_REQUEST
    # longer than brokerHeartbeatTimeoutMaxMs (60 s here): its lease could outlast a restart's grace
    too_long = {**never_expires, "heartbeatTimeoutMills": 60_001}
    assert call(addr, Q.BROKER_HEARTBEAT, too_long)[0] == RC.CONTROLLER_INVALID_REQUEST
    bad_set = {"brokerName": B, "masterBrokerId": 2, "masterEpoch": 2}
    assert call(addr, Q.CONTROLLER_ALTER_SYNC_STATE_SET, bad_set, {"syncStateSet": "x"})[0] == (
        RC.CONTROLLER_INVALID_REQUEST
    )


def test_controller_embedded_in_the_name_server_answers_on_its_port(tmp_path, procs):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    conf = tmp_path / "namesrv.conf"
    conf.write_text(
        f"listenPort={port}\nenableControllerInNamesrv=true\n"
        f"controllerStorePath={tmp_path / 'ctl'}\n"
    )
    procs.append(Proc(["namesrv", "--host", "127.0.0.1", "-c", str(conf)], tmp_path / "ns.log"))
    wait_answering(addr)
    assert join(addr, 1) == 1
    assert call(addr, Q.GET_BROKER_CLUSTER_INFO)[0] == RC.SUCCESS  # still a name server
    code, hdr, _ = call(addr, Q.CONTROLLER_GET_METADATA_INFO)
    assert code == RC.SUCCESS and hdr["isLeader"] == "true"


def _leader(addrs: list[str]) -> str | None:
    for a in addrs:
        try:
            code, hdr, _ = call(a, Q.CONTROLLER_GET_METADATA_INFO, timeout_ms=1000)
        except Exception:  # noqa: BLE001 - a killed peer
            continue
        if hdr.get("isLeader") == "true":
            return a
    return None


def test_three_controllers_on_raft_survive_the_leader_kill9(tmp_path, procs):
    addrs = start_raft_controllers(tmp_path, procs)
    leader = wait_until(lambda: _leader(addrs), 30, "a raft leader", every_s=0.2)
    follower = next(a for a in addrs if a != leader)
    code, hdr, _ = call(
        follower, Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B}
    )
    assert code == RC.CONTROLLER_NOT_LEADER
    for expected in (1, 2):
        join(leader, expected)
        beat(leader, expected, 0, 10 * expected, timeout_ms=60_000)
    code, hdr, _ = call(
        leader, Q.CONTROLLER_ELECT_MASTER, {"clusterName": C, "brokerName": B, "brokerId": 1}
    )
    assert code == RC.SUCCESS and int(hdr["masterBrokerId"]) == 2
    before = replica_info(leader)
    procs[addrs.index(leader)].kill9()
    rest = [a for a in addrs if a != leader]
    new_leader = wait_until(lambda: _leader(rest), 30, "a new raft leader", every_s=0.2)
    assert replica_info(new_leader) == before
    join(new_leader, 3)  # the new leader continues from the same state
    code, hdr, _ = call(
        new_leader, Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B}
    )
    assert int(hdr["nextBrokerId"]) == 4


def test_broker_clients_against_a_real_controller_process(tmp_path, procs):
    """Two ControllerClients (system clock, real sockets) join, one becomes master."""
    port = free_port()
    addr = f"127.0.0.1:{port}"
    procs.append(start_controller(tmp_path, "c0", port))
    wait_answering(addr)

    async def go():
        remoting = RemotingClient()
        timing = {"heartbeat_interval_ms": 200, "sync_metadata_period_ms": 500, "lease_ms": 8000}
        nodes, clients = _started_clients(tmp_path, (addr,), remoting, timing)
        await wait_for(lambda: _roles(nodes) == ["MASTER", "SLAVE"], 20_000, what="roles")
        for c in clients:
            await c.stop()
        await remoting.close()
        return [c.broker_id for c in clients]

    assert sorted(asyncio.run(go())) == [1, 2]
    assert (tmp_path / "b1" / "brokerIdentity").exists()


def _started_clients(tmp_path, addrs: tuple[str, ...], remoting, timing: dict):
    """Two ControllerClients over FakeNodes (system clock, real sockets), started."""
    nodes, clients = [], []
    for i in (1, 2):
        node = FakeNode(100 * i)
        node.clock = SYSTEM_CLOCK
        cfg = ClientConfig(C, B, f"127.0.0.1:{10910 + i}", addrs, **timing)
        clients.append(
            fake_node_client(tmp_path / f"b{i}", cfg, remoting.invoke, node, SYSTEM_CLOCK)
        )
        nodes.append(node)
        clients[-1].start()
    return nodes, clients


def _roles(nodes) -> list[str]:
    return sorted(n.role for n in nodes)


def test_master_lease_outlives_a_controller_leader_kill9(tmp_path, procs):
    """Three Raft controllers, two broker clients; kill -9 the controller leader: the clients
    find the new leader and the master's lease never ends."""
    addrs = start_raft_controllers(tmp_path, procs)
    leader = wait_until(lambda: _leader(addrs), 30, "a raft leader", every_s=0.2)

    async def go():
        remoting = RemotingClient()
        timing = {
            "heartbeat_interval_ms": 300,
            "sync_metadata_period_ms": 1000,
            "heartbeat_timeout_ms": 6000,
            "lease_ms": 4800,
        }
        nodes, clients = _started_clients(tmp_path, tuple(addrs), remoting, timing)
        await wait_for(lambda: _roles(nodes) == ["MASTER", "SLAVE"], 20_000, what="roles")
        master = next(n for n in nodes if n.role == "MASTER")
        procs[addrs.index(leader)].kill9()
        killed_at = time.monotonic()
        await wait_for(
            lambda: all(c.leader not in (None, leader) for c in clients),
            20_000,
            what="new leader",
        )
        await wait_for(lambda: time.monotonic() - killed_at > 8, 12_000, what="8 s after the kill")
        assert master.fenced_at is None and master.role == "MASTER"
        for c in clients:
            await c.stop()
        await remoting.close()

    asyncio.run(go())


def test_raft_leader_kill9_under_load_loses_no_acknowledged_change(tmp_path, procs):
    """Writers keep applying broker ids while the leader is killed -9: every change a leader
    acknowledged is in the new leader's state."""
    import threading

    addrs = start_raft_controllers(tmp_path, procs)
    leader = wait_until(lambda: _leader(addrs), 30, "a raft leader", every_s=0.2)
    acked: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            target = _leader([a for a in addrs if a != leader] if killed.is_set() else addrs)
            if target is None:
                continue
            name = f"load-{n}"
            try:
                code, _, _ = call(
                    target,
                    Q.CONTROLLER_APPLY_BROKER_ID,
                    {
                        "clusterName": C,
                        "brokerName": name,
                        "appliedBrokerId": 1,
                        "registerCheckCode": f"127.0.0.1:1;{n}",
                    },
                    timeout_ms=2000,
                )
            except Exception:  # noqa: BLE001 - the leader died mid-request: outcome unknown
                n += 1
                continue
            if code == RC.SUCCESS:
                acked.append(name)
            n += 1

    killed = threading.Event()
    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(lambda: len(acked) >= 20, 30, "changes acknowledged before the kill")
    procs[addrs.index(leader)].kill9()
    killed.set()
    before_kill = len(acked)
    wait_until(lambda: len(acked) >= before_kill + 20, 30, "changes acknowledged after the kill")
    stop.set()
    thread.join(30)
    new_leader = _leader([a for a in addrs if a != leader])
    missing = [
        n
        for n in acked
        if call(new_leader, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": n})[0] != RC.SUCCESS
    ]
    assert not missing, f"{len(missing)} acknowledged changes lost: {missing[:5]}"
    assert before_kill >= 20 and len(acked) >= before_kill + 20
