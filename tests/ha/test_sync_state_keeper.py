"""The master's SyncStateSet wired (broker/ha/sync_state_keeper.py) on a DrivenClock: what
HAService reports per connection reaches the set, the keeper's round shrinks and proposes to the
controller (1001) and applies its answer, waiting SYNC_MASTER puts are released over the union
of the sets, minInSyncReplicas refuses, every applied change is an event, and broker.conf reads
RocketMQ's keys."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.clock import DrivenClock
from broker.config import BrokerConfig
from broker.ha.confirm_watch import ConfirmWatch
from broker.ha.group_transfer import GroupTransferService
from broker.ha.sync_state_keeper import SyncStateKeeper
from broker.store.results import PutMessageStatus
from contracts.errors import ConfigError, HaproofError

MASTER, S2, S3 = 1, 2, 3


def _config(**kw) -> BrokerConfig:
    return BrokerConfig.from_dict(
        {
            "enableControllerMode": "true",
            "controllerAddr": "127.0.0.1:9878",
            "allAckInSyncStateSet": "true",
            "minInSyncReplicas": "2",
            "haMaxTimeSlaveNotCatchup": "3000",
            **kw,
        }
    )


class Rig:
    """A keeper over a stand-in HAService: connections named by peer, each slave introduced
    (906) with its controller broker id and node name; a controller that takes every proposal
    unless told to refuse."""

    def __init__(self, clock: DrivenClock, **conf) -> None:
        self.clock = clock
        self.keeper = SyncStateKeeper(_config(**conf), "node-m", clock)
        self.ha = SimpleNamespace(
            peer_ids={}, peer_names={}, connections=[], store=SimpleNamespace(max_phy_offset=0)
        )
        self.ha.transfer, self.ha.confirm_watch = GroupTransferService(clock), ConfirmWatch()
        self.proposals: list[frozenset[int]] = []
        self.events: list[tuple[str, dict]] = []
        self.refuse = False
        self.set_epoch = 1
        self.keeper.connect(self._alter, lambda: (5, frozenset(), 0))
        self.keeper.on_event = lambda kind, fields: self.events.append((kind, fields))
        self.keeper.attach(self.ha)
        self.conns = {}
        for sid in (S2, S3):
            peer = f"127.0.0.1:{40000 + sid}"
            self.ha.peer_ids[peer], self.ha.peer_names[peer] = sid, f"node-{sid}"
            self.conns[sid] = SimpleNamespace(peer=peer, ack_offset=-1, sent_end=0)

    async def _alter(self, members):
        self.proposals.append(frozenset(members))
        if self.refuse:
            return None
        self.set_epoch += 1
        return self.set_epoch

    def write(self, end: int) -> None:
        self.ha.store.max_phy_offset = end

    def replicate(self, sid: int, ack: int) -> None:
        conn = self.conns[sid]
        conn.sent_end = self.ha.store.max_phy_offset
        self.keeper.conn_transfer(conn, conn.sent_end)
        conn.ack_offset = ack
        self.keeper.conn_ack(conn, ack)


def _run(body) -> None:
    async def main():
        clock = DrivenClock()
        rig = Rig(clock)
        rig.ha.transfer.start()
        rig.keeper.begin(MASTER, {MASTER, S2, S3}, 5, 1, 0)
        rig.keeper.start()
        try:
            await body(rig, clock)
        finally:
            await rig.keeper.stop()
            await rig.ha.transfer.stop()

    asyncio.run(main())


def test_a_silent_slave_leaves_after_ha_max_time_and_the_waiting_put_is_answered():
    async def body(rig: Rig, clock: DrivenClock):
        rig.write(1000)
        rig.replicate(S2, 1000)
        rig.replicate(S3, 1000)
        assert rig.keeper.acknowledged_offset() == 1000 and rig.keeper.admit_put() is None
        rig.write(1500)
        waiting = asyncio.ensure_future(rig.ha.transfer.wait(1500, 60_000))
        rig.replicate(S2, 1500)  # S3 stops acking (SIGSTOP)
        await clock.settle()
        assert not waiting.done(), "allAckInSyncStateSet: S3 is a member and has not acked"
        await clock.advance(2_900)
        rig.replicate(S2, 1500)  # S2 keeps up
        assert rig.proposals == []  # S3 caught up 2.9 s ago: within haMaxTimeSlaveNotCatchup
        await clock.advance(1_200)
        assert rig.proposals == [{MASTER, S2}]
        assert await waiting is PutMessageStatus.PUT_OK  # applied: S3 no longer awaited
        assert rig.keeper.status()["syncStateSet"] == [MASTER, S2]
        assert rig.events == [
            (
                "sync_state_set_changed",
                {
                    "members": ["node-m", "node-2"],
                    "memberIds": [MASTER, S2],
                    "syncStateSetEpoch": 2,
                    "masterEpoch": 5,
                    "left": [S3],
                    "joined": [],
                },
            )
        ]

    _run(body)


def test_a_closed_connection_leaves_at_once_and_min_in_sync_replicas_refuses():
    async def body(rig: Rig, clock: DrivenClock):
        rig.write(800)
        rig.replicate(S2, 800)
        rig.replicate(S3, 800)
        rig.keeper.conn_closed(rig.conns[S3].peer)
        await clock.settle()  # the round runs at once (woken), not a second later
        assert rig.proposals == [{MASTER, S2}]
        rig.keeper.conn_closed(rig.conns[S2].peer)
        await clock.settle()
        assert rig.proposals[-1] == {MASTER}
        refusal = rig.keeper.admit_put()
        assert refusal is not None and refusal.startswith("in-sync replicas not enough")
        # S3 is back and catches up: it is proposed, and puts are admitted again
        rig.replicate(S3, 800)
        await clock.settle()
        assert rig.proposals[-1] == {MASTER, S3} and rig.keeper.admit_put() is None
        assert [e[1]["memberIds"] for e in rig.events] == [[1, 2], [1], [1, 3]]

    _run(body)


def test_a_refused_proposal_changes_nothing_and_is_made_again():
    async def body(rig: Rig, clock: DrivenClock):
        rig.replicate(S2, 0)
        rig.replicate(S3, 0)
        rig.refuse = True
        rig.keeper.conn_closed(rig.conns[S3].peer)
        await clock.settle()
        assert rig.proposals == [{MASTER, S2, S3} - {S3}] and rig.events == []
        assert rig.keeper.status()["syncStateSet"] == [MASTER, S2, S3]
        assert rig.keeper.admit_put() is None
        rig.refuse = False
        rig.replicate(S2, 0)
        await clock.advance(1_000)  # the next round's shrink: S3 has no connection
        assert rig.keeper.status()["syncStateSet"] == [MASTER, S2]

    _run(body)


def test_a_controller_that_cannot_be_reached_is_a_refusal_not_a_crash():
    async def body(rig: Rig, clock: DrivenClock):
        async def unreachable(members):
            raise HaproofError("controller 127.0.0.1:9878 unreachable")

        rig.keeper.connect(unreachable, lambda: (5, frozenset(), 0))
        rig.keeper.conn_closed(rig.conns[S3].peer)
        await clock.settle()
        assert rig.keeper.state.proposed is None and rig.keeper.state.members == {1, 2, 3}
        assert rig.keeper.failures == 0

    _run(body)


def test_a_newer_set_the_controller_holds_for_this_epoch_is_taken():
    async def body(rig: Rig, clock: DrivenClock):
        rig.keeper.connect(rig._alter, lambda: (5, frozenset({MASTER, S3}), 7))
        rig.replicate(S2, 0)
        rig.replicate(S3, 0)
        await clock.advance(1_000)
        assert rig.keeper.status()["syncStateSet"] == [MASTER, S3]
        assert rig.keeper.status()["syncStateSetEpoch"] == 7
        assert rig.events[-1][1]["left"] == [S2]

    _run(body)


def test_an_idle_connection_counts_as_caught_up_only_once_all_it_was_sent_is_acked():
    async def body(rig: Rig, clock: DrivenClock):
        rig.write(500)
        rig.replicate(S2, 500)
        rig.replicate(S3, 500)
        rig.write(900)
        rig.replicate(S2, 900)
        s3 = rig.conns[S3]
        s3.sent_end = 900  # sent, never acked (a SIGSTOPped slave): idle is no catching up
        for _ in range(5):
            await clock.advance(1_000)
            rig.keeper.conn_idle(s3)
            rig.keeper.conn_idle(rig.conns[S2])
        assert rig.keeper.status()["syncStateSet"] == [MASTER, S2]

    _run(body)


def test_outside_a_term_nothing_is_refused_or_counted():
    keeper = SyncStateKeeper(_config(), "node-m", DrivenClock())
    assert keeper.admit_put() is None and not keeper.active and keeper.status() == {}
    keeper.on_ack(S2, 100, 100)
    keeper.on_disconnect(S2)  # no term: no-ops


def test_broker_conf_reads_rocketmq_keys_and_checks_them():
    cfg = _config()
    assert cfg.all_ack_in_sync_state_set and cfg.min_in_sync_replicas == 2
    assert cfg.ha_max_time_slave_not_catchup_ms == 3000
    plain = BrokerConfig.from_dict({})
    assert not plain.all_ack_in_sync_state_set and plain.min_in_sync_replicas == 1
    assert plain.ha_max_time_slave_not_catchup_ms == 15_000
    for key in ("minInSyncReplicas", "haMaxTimeSlaveNotCatchup"):
        with pytest.raises(ConfigError, match=key):
            _config(**{key: "0"})


def test_a_put_below_min_in_sync_replicas_is_refused_before_it_is_appended():
    """The send path's own check (a send-back comes through ``put``): nothing reaches the
    store, and the status says why."""
    from broker.processors.send import REFUSAL_CODES, SendProcessor
    from broker.remoting.codes import ResponseCode
    from contracts.record.model import Message

    refusal = "in-sync replicas not enough: 1 in the SyncStateSet [1], minInSyncReplicas=2"
    replication = SimpleNamespace(admit_put=lambda: refusal, ha=object())
    store = SimpleNamespace()  # any use of the store fails the test
    send = SendProcessor(store, _config(), topics=None, replication=replication)
    result, status = asyncio.run(send.put(Message(topic="T", body=b"x", queue_id=0)))
    assert status is PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH and result.remark == refusal
    assert REFUSAL_CODES.get(status, ResponseCode.SYSTEM_ERROR) == ResponseCode.SYSTEM_ERROR


def test_the_masters_events_are_archive_events():
    """What controller mode records (the lease's expiry from the controller client, a set
    change from the keeper) goes to the node's archiver as events the archive layout accepts:
    the controller's master epoch travels as ``masterEpoch`` (``epoch`` is the archive's own)."""
    from broker.ha.controller_role import ControllerModeService
    from contracts import archive_layout as layout

    archived: list[tuple[str, dict]] = []
    service = SimpleNamespace(_archive=lambda kind, fields: archived.append((kind, fields)))
    ControllerModeService.record(service, "lease_lost", {"epoch": 4, "lastContactAt": 1234})
    assert archived == [("lease_lost", {"masterEpoch": 4, "lastContactAt": 1234})]

    async def body(rig: Rig, clock: DrivenClock):
        rig.replicate(S2, 0)
        rig.replicate(S3, 0)
        rig.keeper.conn_closed(rig.conns[S3].peer)
        await clock.settle()
        archived.extend(rig.events)

    _run(body)
    for kind, fields in archived:
        doc = layout.make_event(kind, "node-m", "C", "broker-a", 1, 4, **fields)
        assert layout.parse_event(layout.json_bytes(doc))["kind"] == kind
    assert [k for k, _ in archived] == ["lease_lost", "sync_state_set_changed"]
