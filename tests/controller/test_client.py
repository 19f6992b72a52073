"""The broker-side controller client against an in-process controller (its processor, journal
and housekeeping), on one DrivenClock: registration, election, SyncStateSet, a partitioned
master's lease ending before the controller elects another, rejoin as slave; crash-safe ids."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from broker.clock import DrivenClock
from broker.controller.processor import ControllerProcessor
from broker.ha.broker_identity import BrokerIdentityStore, RegisterState, allocate_broker_id
from broker.ha.controller_client import ClientConfig
from broker.remoting.codes import RequestCode as Q
from contracts.errors import HaproofError, RemotingError
from tests.controller.inproc import CTL, FakeNode, Net, fake_node_client, in_process_controller


def test_lease_ends_before_the_controller_elects_and_the_old_master_rejoins_as_slave(tmp_path):
    async def go():
        clock = DrivenClock()
        sm, journal, ctl = in_process_controller(tmp_path, clock, scan_ms=500)
        net = Net(ControllerProcessor(ctl).handlers())
        ctl.notifier = net.notify
        nodes, clients = {}, {}
        for i, offset in ((1, 100), (2, 300), (3, 200)):
            addr = f"127.0.0.1:{10910 + i}"
            nodes[addr] = FakeNode(offset)
            nodes[addr].clock = clock
            cc = ClientConfig("DefaultCluster", "broker-a", addr, (CTL,), lease_ms=8000)
            clients[addr] = fake_node_client(
                tmp_path / f"b{i}", cc, net.invoke_for(addr), nodes[addr], clock
            )
        net.clients = clients
        ctl.housekeeping.start()
        for c in clients.values():
            c.start()
            await clock.advance(100)  # they start one after another
        await clock.advance(6000)
        roles = {a: n.role for a, n in nodes.items()}
        master = next(a for a, r in roles.items() if r == "MASTER")
        assert list(roles.values()).count("MASTER") == 1
        assert (
            master == "127.0.0.1:10911"
        )  # alone when it asked: the first election's only candidate
        assert all(r == "SLAVE" for a, r in roles.items() if a != master)
        assert await clients[master].alter_sync_state_set({1, 2, 3})
        # partition the master from the controller
        net.cut.add(master)
        cut_at = clock.monotonic_ms()
        elected_at = None
        for _ in range(300):
            await clock.advance(100)
            info = sm.tables.sync_states["broker-a"]
            if elected_at is None and info.masterBrokerId != clients[master].broker_id:
                elected_at = clock.monotonic_ms()
                break
        fenced_at = nodes[master].fenced_at
        assert fenced_at is not None and elected_at is not None
        assert fenced_at < elected_at, (fenced_at - cut_at, elected_at - cut_at)
        assert 7000 < fenced_at - cut_at <= 9100 and 9000 < elected_at - cut_at <= 11_600
        new_master = next(
            a
            for a, c in clients.items()
            if c.broker_id == sm.tables.sync_states["broker-a"].masterBrokerId
        )
        # heal: the old master learns the newer epoch and becomes a slave, still fenced out of
        # mastership; the new master took writes after the old one had stopped
        net.cut.clear()
        await clock.advance(7000)
        assert nodes[master].role == "SLAVE" and nodes[new_master].role == "MASTER"
        assert nodes[master].epoch == nodes[new_master].epoch == 2
        for c in clients.values():
            await c.stop()
        await ctl.housekeeping.stop()
        journal.close()
        return fenced_at - cut_at, elected_at - cut_at

    fenced_after_ms, elected_after_ms = asyncio.run(go())
    print(
        f"lease: fenced {fenced_after_ms:.0f} ms, elected {elected_after_ms:.0f} ms after the cut"
    )


def test_broker_id_allocation_survives_a_lost_answer_and_a_crash(tmp_path):
    async def go():
        sm, journal, ctl = in_process_controller(tmp_path, DrivenClock())
        handlers = ControllerProcessor(ctl).handlers()
        lose_apply_answer = True

        async def invoke(addr, req, timeout_ms):
            nonlocal lose_apply_answer
            resp = await handlers[req.code](None, req)
            if req.code == 1013 and lose_apply_answer:
                lose_apply_answer = False
                raise RemotingError("answer lost")  # applied on the controller, never seen
            return resp

        store = BrokerIdentityStore(tmp_path, "DefaultCluster", "broker-a")
        try:
            await allocate_broker_id(store, invoke, CTL, "127.0.0.1:10911", 1)
        except RemotingError:
            pass
        assert store.state()[0] is RegisterState.CREATE_TEMP_METADATA_FILE_DONE
        # "restart": the same id and check code are applied again and accepted
        assert await allocate_broker_id(store, invoke, CTL, "127.0.0.1:10911", 2) == 1
        assert store.state()[0] is RegisterState.CREATE_METADATA_FILE_DONE
        other = BrokerIdentityStore(tmp_path / "o", "DefaultCluster", "broker-a")
        (tmp_path / "o").mkdir()
        assert await allocate_broker_id(other, invoke, CTL, "127.0.0.1:10912", 3) == 2
        assert sorted(sm.tables.replicas["broker-a"].brokerIdInfo) == [1, 2]
        journal.close()

    asyncio.run(go())


def test_a_registration_refused_by_a_deposed_leader_asks_who_leads_again(tmp_path):
    """CI run of 2026-11-26: the Raft leader moved between the client's leader lookup and its
    APPLY_BROKER_ID; the client kept the old address and was refused (2007) every round."""

    async def go():
        clock = DrivenClock()
        sm, journal, ctl = in_process_controller(tmp_path, clock)
        handlers = ControllerProcessor(ctl).handlers()
        old, asked = "127.0.0.1:9877", []

        async def invoke(addr, req, timeout_ms):
            asked.append((addr, req.code))
            if addr == CTL:
                return await handlers[req.code](None, req)
            if req.code == 1005 and len(asked) == 1:  # leads when first asked, then deposed
                return req.make_response(0, ext_fields={"isLeader": "true"})
            if req.code == 1005:
                return req.make_response(0, ext_fields={"isLeader": "false"})
            return req.make_response(2007, f"not in leader state; leader: {CTL}")

        node = FakeNode(100)
        node.clock = clock
        cc = ClientConfig("DefaultCluster", "broker-a", "127.0.0.1:10911", (old, CTL))
        client = fake_node_client(tmp_path / "b", cc, invoke, node, clock)
        client.start()
        await clock.advance(5000)
        assert client.leader == CTL and client.broker_id == 1, asked[:8]
        assert node.role == "MASTER"
        await client.stop()
        journal.close()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("code", "failure"),
    [
        (Q.CONTROLLER_GET_REPLICA_INFO, "no answer"),
        (Q.CONTROLLER_ELECT_MASTER, "2007"),
        (Q.CONTROLLER_ELECT_MASTER, "no answer"),
        (Q.CONTROLLER_ALTER_SYNC_STATE_SET, "2007"),
        (Q.CONTROLLER_ALTER_SYNC_STATE_SET, "no answer"),
    ],
)
def test_a_request_refused_or_unanswered_by_the_leader_forgets_it(tmp_path, code, failure):
    """The family of the CI failure of 2026-11-26 beyond registration: the Raft leader moves
    (or stops answering) just as it gets a pull (1004), an election (1002) or a SyncStateSet
    change (1001). The deposed controller still takes heartbeats (every controller does), so
    only the refused request can tell the client: it forgets the leader at once and the next
    round asks who leads."""

    async def go():
        clock = DrivenClock()
        sm, journal, ctl = in_process_controller(tmp_path, clock)
        handlers = ControllerProcessor(ctl).handlers()
        old, state = "127.0.0.1:9877", {"armed": False, "deposed": False}

        async def invoke(addr, req, timeout_ms):
            if addr == old and state["armed"] and req.code == code:
                state["deposed"] = True
            if addr == CTL or not state["deposed"]:  # the old one leads: it answers the same
                resp = await handlers[req.code](None, req)
                if req.code == Q.CONTROLLER_GET_METADATA_INFO:
                    leads = (addr == old) != state["deposed"]
                    resp.ext_fields["isLeader"] = "true" if leads else "false"
                return resp
            if req.code == Q.CONTROLLER_GET_METADATA_INFO:
                return req.make_response(0, ext_fields={"isLeader": "false"})
            if req.code == Q.BROKER_HEARTBEAT:
                return req.make_response(0, "Heart beat success")
            if failure == "no answer":
                await clock.sleep_ms(timeout_ms)
                raise RemotingError(f"{old}: timed out after {timeout_ms} ms")
            return req.make_response(2007, f"not in leader state; leader: {CTL}")

        node = FakeNode(100)
        node.clock = clock
        cc = ClientConfig("DefaultCluster", "broker-a", "127.0.0.1:10911", (old, CTL))
        client = fake_node_client(tmp_path / "b", cc, invoke, node, clock)

        async def a_round(call=None):
            running = asyncio.ensure_future(call or client.run_once())
            while not running.done():
                await clock.advance(500)
            with contextlib.suppress(HaproofError):
                await running

        state["armed"] = code != Q.CONTROLLER_ALTER_SYNC_STATE_SET
        await a_round()
        if code == Q.CONTROLLER_ALTER_SYNC_STATE_SET:
            assert node.role == "MASTER" and client.leader == old
            state["armed"] = True
            await a_round(client.alter_sync_state_set({1}))
        assert state["deposed"] and client.leader is None
        for _ in range(3):
            await a_round()
        assert client.leader == CTL and node.role == "MASTER"
        assert client.last_leader_ack_ms is not None
        journal.close()

    asyncio.run(go())


def test_a_hung_controller_does_not_slow_the_rounds_or_pile_up_heartbeats(tmp_path):
    """One of the controllers hangs (SIGSTOP: a heartbeat to it is never answered). A round
    waits for the leader's answer only: the leader still hears from the broker every interval
    and renews its lease, and the hung one never has more than one heartbeat out."""

    async def go():
        clock = DrivenClock()
        sm, journal, ctl = in_process_controller(tmp_path, clock)
        handlers = ControllerProcessor(ctl).handlers()
        hung, to_leader, to_hung = "127.0.0.1:9877", [], []
        heard_by_hung = asyncio.Event()

        async def invoke(addr, req, timeout_ms):
            if addr == hung:
                to_hung.append(req.code)
                heard_by_hung.set()
                await asyncio.Future()  # never answered
            if req.code == Q.BROKER_HEARTBEAT:
                to_leader.append(clock.monotonic_ms())
            return await handlers[req.code](None, req)

        node = FakeNode(100)
        node.clock = clock
        cc = ClientConfig("DefaultCluster", "broker-a", "127.0.0.1:10911", (CTL, hung))
        client = fake_node_client(tmp_path / "b", cc, invoke, node, clock)
        client.start()
        try:
            await clock.advance(10 * cc.heartbeat_interval_ms)
            assert heard_by_hung.is_set()
            assert to_hung.count(Q.BROKER_HEARTBEAT) == 1  # the first, still out
            assert len(to_leader) >= 10, to_leader
            assert client.leader == CTL
            assert client.last_leader_ack_ms is not None
            assert clock.monotonic_ms() - client.last_leader_ack_ms <= cc.heartbeat_interval_ms
        finally:
            await client.stop()
            journal.close()

    asyncio.run(go())
