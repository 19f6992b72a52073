"""What the simulation's controller mode found in the controller, pinned (``haproof sim
--controller``; docs/simulation.md "What it found"): a closed channel does not let the
controller elect while the old master's lease may hold, and a restarted master asking for an
election gets a new epoch."""

from __future__ import annotations

import asyncio

from broker.remoting.codes import ResponseCode as RC
from tests.controller.test_state import Group

TIMEOUT_MS = 10_000  # the heartbeat timeout Group's brokers report (the default)


def _group_with_master() -> Group:
    g = Group()
    g.join(3)
    for b in (1, 2, 3):
        g.beat(b, 0, 100)
    assert g.elect(1).header["masterBrokerId"] == 1
    assert g.alter({1, 2, 3}).code == RC.SUCCESS
    return g


def test_a_closed_channel_does_not_elect_while_the_masters_lease_may_hold():
    g = _group_with_master()
    channel = object()
    g.hb.on_heartbeat("DefaultCluster", "broker-a", "127.0.0.1:10911", 1, channel=channel)
    asyncio.run(g.clock.advance(1_000))
    g.beat(2, 1, 100)
    g.beat(3, 1, 100)
    # a partition ends: the master's connection is reset, the broker is not alive any more...
    assert g.hb.on_channel_close(channel) == [("DefaultCluster", "broker-a", 1)]
    assert not g.hb.is_alive("DefaultCluster", "broker-a", 1)
    # ...but it may still take writes under its lease: no election before its timeout
    _refused_under_the_lease_then_elected(g, TIMEOUT_MS)


def test_a_heartbeat_after_the_close_makes_the_broker_alive_again():
    g = _group_with_master()
    channel = object()
    g.hb.on_heartbeat("DefaultCluster", "broker-a", "127.0.0.1:10911", 1, channel=channel)
    g.hb.on_channel_close(channel)
    g.beat(1, 1, 100)
    assert g.hb.is_alive("DefaultCluster", "broker-a", 1)


def test_the_master_itself_asking_gets_a_new_epoch_others_get_the_master_as_is():
    g = _group_with_master()
    assert g.elect(2).code == RC.CONTROLLER_MASTER_STILL_EXIST
    assert g.elect(1, designate=True).code == RC.CONTROLLER_MASTER_STILL_EXIST
    assert g.info().masterEpoch == 1
    # the master restarted (its log already holds epoch 1, maybe without a lost tail a slave
    # holds): it asks, and stays master under a new epoch
    r = g.elect(1)
    assert r.code == RC.SUCCESS and r.header["masterBrokerId"] == 1
    assert r.header["masterEpoch"] == 2 and g.info().masterEpoch == 2


def test_a_restarted_controller_does_not_elect_while_an_unheard_masters_lease_may_hold():
    """Sim (controller crash steps): a restarted controller's heartbeat table is empty; a slave
    heartbeats before the master does (the master cut from the controller, or still
    reconnecting), and the first housekeeping round elected the slave while the master's lease
    still held: two writers. An unheard-of master's lease may hold for RESTART_GRACE_MS."""
    from broker.controller.heartbeat import RESTART_GRACE_MS, BrokerHeartbeatManager

    g = _group_with_master()
    asyncio.run(g.clock.advance(60_000))
    g.hb = BrokerHeartbeatManager(g.clock)  # the restarted process: nobody heard from yet
    g.beat(2, 1, 100)
    g.beat(3, 1, 100)
    _refused_under_the_lease_then_elected(g, RESTART_GRACE_MS)


def test_the_restart_grace_is_the_longest_broker_heartbeat_timeout_configured():
    """brokerHeartbeatTimeoutMaxMs: brokers may beat with up to 20 s, so a restarted
    controller holds an unheard-of master as possibly leased for 20 s, not the default 10."""
    from broker.controller.heartbeat import RESTART_GRACE_MS, BrokerHeartbeatManager

    g = _group_with_master()
    asyncio.run(g.clock.advance(60_000))
    g.hb = BrokerHeartbeatManager(g.clock, grace_ms=20_000)
    g.beat(2, 1, 100)
    g.beat(3, 1, 100)
    asyncio.run(g.clock.advance(RESTART_GRACE_MS + 1))  # past the default: still held
    _refused_under_the_lease_then_elected(g, 20_000 - RESTART_GRACE_MS)


def test_an_election_ranks_a_broker_by_its_latest_report_not_its_highest():
    """A broker that reported log end 500, then lost its unflushed tail (a power loss within
    its heartbeat timeout) and reports 300, ranks by 300 (RocketMQ's DefaultBrokerHeartbeatManager
    keeps the highest within an epoch, and would elect it over one holding 400)."""
    g = _group_with_master()
    for b, end in ((2, 500), (3, 400)):
        g.beat(b, 1, end)
    g.beat(2, 1, 300)
    assert g.hb.live_info("DefaultCluster", "broker-a", 2).maxOffset == 300
    asyncio.run(g.clock.advance(TIMEOUT_MS + 1))  # the master goes silent
    g.beat(2, 1, 300)
    g.beat(3, 1, 400)
    r = g.elect(-1)
    assert r.code == RC.SUCCESS and r.header["masterBrokerId"] == 3


def _refused_under_the_lease_then_elected(g, lease_ms: int) -> None:
    """The master's lease may hold: an election is refused naming it; ``lease_ms`` later, the
    slaves still beating, it may not, and a slave is elected under epoch 2."""
    assert g.hb.lease_may_hold("DefaultCluster", "broker-a", 1)
    r = g.elect(-1)
    assert r.code == RC.CONTROLLER_ELECT_MASTER_FAILED and "lease" in r.remark
    assert g.info().masterBrokerId == 1 and g.info().masterEpoch == 1
    asyncio.run(g.clock.advance(lease_ms + 1))
    g.beat(2, 1, 100)
    g.beat(3, 1, 100)
    assert not g.hb.lease_may_hold("DefaultCluster", "broker-a", 1)
    r = g.elect(-1)
    assert r.code == RC.SUCCESS and r.header["masterBrokerId"] in (2, 3)
    assert g.info().masterEpoch == 2
