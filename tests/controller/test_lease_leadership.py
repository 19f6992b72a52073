"""A master's lease is renewed only by a controller that leads at answer time
(``broker/ha/lease_ack.py``), on one DrivenClock against an in-process controller whose
heartbeat answers are rewritten: a controller saying it does not lead (a Raft leader that lost
its majority and stepped down, still answering), one saying nothing (RocketMQ's controller, a
haproof controller before the fields) and one announcing a fallback as long as the lease renew
nothing, so the master fences within a lease and stays fenced; an announced fallback shortens
the lease by that much. On the other side, a controller that begins to lead does not elect over
a master whose lease the leader before it may have renewed (its own table long without the
master's heartbeats) until a heartbeat timeout after its term began."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.clock import DrivenClock
from broker.controller.config import ControllerConfig
from broker.controller.controller import Controller
from broker.controller.manager import Result
from broker.controller.memory_log import MemoryLog
from broker.controller.processor import ControllerProcessor
from broker.controller.state_machine import ControllerStateMachine
from broker.ha.controller_client import ClientConfig
from broker.ha.lease_ack import LeaseAck, lease_ack
from broker.remoting.codes import RequestCode as Q
from broker.remoting.command import RemotingCommand
from tests.controller.inproc import CTL, FakeNode, Net, fake_node_client, in_process_controller
from tests.controller.test_sim_findings import (
    TIMEOUT_MS,
    _group_with_master,
    _refused_under_the_lease_then_elected,
)

LEASE_MS, BEAT_MS = 8000, 1000
ADDR = "127.0.0.1:10911"


def _rewrite(answer: RemotingCommand, how: str) -> None:
    fields = answer.ext_fields
    if how == "not leading":
        fields["isLeader"] = "false"
    elif how == "says nothing":
        fields.pop("isLeader"), fields.pop("leaderFallbackMs")
    elif how == "fallback as long as the lease":
        fields["leaderFallbackMs"] = str(LEASE_MS)
    elif how == "fallback not a number":
        fields["leaderFallbackMs"] = "soon"
    elif how.startswith("fallback "):
        fields["leaderFallbackMs"] = how.removeprefix("fallback ")


async def _master(tmp_path, clock: DrivenClock, answers: dict):
    """One broker elected master by an in-process controller; its heartbeat answers rewritten
    as ``answers["how"]`` says."""
    sm, journal, ctl = in_process_controller(tmp_path, clock)
    net = Net(ControllerProcessor(ctl).handlers())
    handler = net.handlers[Q.BROKER_HEARTBEAT]

    async def heartbeat(conn, req):
        answer = await handler(conn, req)
        _rewrite(answer, answers["how"])
        answers["last_answered_ms"] = clock.monotonic_ms()  # no delay on this network
        return answer

    net.handlers = {**net.handlers, Q.BROKER_HEARTBEAT: heartbeat}
    node = FakeNode(100)
    node.clock = clock
    cc = ClientConfig("DefaultCluster", "broker-a", ADDR, (CTL,), heartbeat_interval_ms=BEAT_MS)
    client = fake_node_client(tmp_path / "b", cc, net.invoke_for(ADDR), node, clock)
    net.clients = {ADDR: client}
    client.start()
    await clock.advance(3 * BEAT_MS)
    assert node.role == "MASTER" and node.fenced_at is None
    return net, node, client, journal


@pytest.mark.parametrize(
    "how",
    ["not leading", "says nothing", "fallback as long as the lease", "fallback not a number"],
)
def test_an_ack_that_does_not_vouch_for_leadership_renews_no_lease(tmp_path, how):
    async def go():
        clock, answers = DrivenClock(), {"how": "as is"}
        net, node, client, journal = await _master(tmp_path, clock, answers)
        answers["how"] = how
        changed_at = clock.monotonic_ms()
        for _ in range(3 * LEASE_MS // 100):
            await clock.advance(100)
            if node.fenced_at is not None:
                break
        assert node.fenced_at is not None, f"{how}: the lease was renewed"
        # the last renewing beat was sent before the change: fenced within a lease of it
        assert node.fenced_at - changed_at <= LEASE_MS + 1
        await clock.advance(3 * LEASE_MS)  # more answers of the same kind: still fenced
        assert node.fenced_at is not None and client.fenced and node.role == "MASTER"
        answers["how"] = "as is"  # the leader vouches again: writes resume under the epoch
        await clock.advance(client.cfg.sync_metadata_period_ms + 2 * BEAT_MS)
        assert node.fenced_at is None and not client.fenced
        await client.stop()
        journal.close()

    asyncio.run(go())


def test_the_announced_fallback_shortens_the_lease(tmp_path):
    """A Raft leader may lead up to its fallback after it last heard from a majority: the
    lease counts from the beat's send time less that fallback."""
    fallback_ms = 3000

    async def go():
        clock, answers = DrivenClock(), {"how": f"fallback {fallback_ms}"}
        net, node, client, journal = await _master(tmp_path, clock, answers)
        await clock.advance(3 * BEAT_MS)
        assert node.fenced_at is None  # 5 s of lease left at each beat: renewed in time
        net.cut.add(ADDR)
        while node.fenced_at is None:
            await clock.advance(10)
        assert node.fenced_at - answers["last_answered_ms"] == pytest.approx(
            LEASE_MS - fallback_ms, abs=20
        )
        await client.stop()
        journal.close()

    asyncio.run(go())


def test_lease_ack_reads_the_answer():
    req = RemotingCommand.request(Q.BROKER_HEARTBEAT, {})
    ok = req.make_response(0, ext_fields={"isLeader": True, "leaderFallbackMs": 500})
    assert lease_ack(ok, 10_000.0, LEASE_MS) == LeaseAck(True, 9_500.0)
    refused = req.make_response(2007, ext_fields={"isLeader": True, "leaderFallbackMs": 0})
    assert lease_ack(refused, 10_000.0, LEASE_MS).renews_from_ms is None
    for bad in (-1, LEASE_MS, "1e3", "9" * 5000):
        answer = req.make_response(0, ext_fields={"isLeader": True, "leaderFallbackMs": bad})
        assert lease_ack(answer, 10_000.0, LEASE_MS) == LeaseAck(True, None), bad


def test_a_new_leader_does_not_elect_while_a_lease_the_old_one_renewed_may_hold():
    """The master's link to this controller broke long ago (its table dropped the master), the
    old leader went on renewing the lease; this one leads now: no election for a timeout."""
    g = _group_with_master()
    asyncio.run(g.clock.advance(TIMEOUT_MS + 1))
    g.beat(2, 1, 100)
    g.beat(3, 1, 100)
    assert ("DefaultCluster", "broker-a", 1) in g.hb.scan_not_active()  # dropped
    assert not g.hb.lease_may_hold("DefaultCluster", "broker-a", 1)  # a follower's view
    g.hb.on_leadership()
    _refused_under_the_lease_then_elected(g, TIMEOUT_MS)


class _NewTermLog(MemoryLog):
    """A log whose next barrier begins a term."""

    def __init__(self, sm: ControllerStateMachine) -> None:
        super().__init__(sm)
        self.new_term = False

    async def barrier(self) -> bool:
        began, self.new_term = self.new_term, False
        return began


def test_the_first_barrier_of_a_term_starts_the_new_leaders_grace():
    async def go():
        clock, sm = DrivenClock(), ControllerStateMachine()
        log = _NewTermLog(sm)
        ctl = Controller(ControllerConfig(), log, sm, clock=clock)
        await ctl.submit(lambda m: Result())
        assert ctl.heartbeats.leading_since_ms is None
        await clock.advance(5_000)
        log.new_term = True
        await ctl.submit(lambda m: Result())
        assert ctl.heartbeats.leading_since_ms == clock.monotonic_ms() == 5_000

    asyncio.run(go())


_ANSWER_VALUES = st.one_of(
    st.sampled_from(["true", "false", "True", "", "0", "-1", "7999", "8000", "null"]),
    st.integers(-(10**6), 10**6).map(str),
    st.text(max_size=20),
)


@given(
    code=st.sampled_from([0, 1, 2007]),
    leader=st.one_of(st.none(), _ANSWER_VALUES),
    fallback=st.one_of(st.none(), _ANSWER_VALUES),
    sent_ms=st.floats(0, 1e12),
)
def test_lease_ack_renews_only_from_a_leader_with_a_fallback_below_the_lease(
    code, leader, fallback, sent_ms
):
    fields = {k: v for k, v in (("isLeader", leader), ("leaderFallbackMs", fallback)) if v}
    answer = RemotingCommand.request(Q.BROKER_HEARTBEAT, {}).make_response(code, ext_fields=fields)
    ack = lease_ack(answer, sent_ms, LEASE_MS)
    leads = code == 0 and leader == "true"
    assert ack.leading == leads
    try:
        valid = 0 <= int(fallback) < LEASE_MS
    except (TypeError, ValueError):
        valid = False
    if leads and valid:
        assert ack.renews_from_ms == sent_ms - int(fallback) <= sent_ms
    else:
        assert ack.renews_from_ms is None
