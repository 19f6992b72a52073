"""The controller's state machine, decisions and election, pure, on a DrivenClock."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.clock import DrivenClock
from broker.controller.election import choose, rank_key
from broker.controller.events import Candidate, decode_event, encode_event
from broker.controller.heartbeat import BrokerHeartbeatManager
from broker.controller.manager import ReplicasInfoManager
from broker.controller.state_machine import ControllerStateMachine
from broker.controller.tables import ReplicaTables
from broker.remoting.codes import ResponseCode as RC

C, B = "DefaultCluster", "broker-a"


class Group:
    """A controller's state machine and liveness, events applied as a log would."""

    def __init__(self, unclean: bool = False) -> None:
        self.clock = DrivenClock()
        self.hb = BrokerHeartbeatManager(self.clock)
        self.sm = ControllerStateMachine()
        self.log: list[bytes] = []
        self.mgr = ReplicasInfoManager(self.sm.tables, unclean_allowed=unclean)

    def commit(self, result):
        for event in result.events:
            self.log.append(encode_event(event))
            self.sm.apply(decode_event(self.log[-1]))
        return result

    def join(self, n: int) -> None:
        for i in range(1, n + 1):
            nxt = self.mgr.get_next_broker_id(C, B).header["nextBrokerId"]
            assert nxt == i
            r = self.commit(self.mgr.apply_broker_id(C, B, nxt, f"127.0.0.1:{10910 + i};{i}"))
            assert r.code == RC.SUCCESS

    def beat(self, bid: int, epoch: int = 0, offset: int = 0, priority: int | None = None):
        self.hb.on_heartbeat(
            C,
            B,
            f"127.0.0.1:{10910 + bid}",
            bid,
            epoch=epoch,
            max_offset=offset,
            confirm_offset=offset,
            priority=priority,
        )

    def elect(self, bid: int = -1, designate: bool = False):
        return self.commit(self.mgr.elect_master(B, bid, designate, self.hb, self.clock.wall_ms()))

    def info(self):
        return self.sm.tables.sync_states[B]

    def alter(self, ids, master=None, epoch=None, set_epoch=None):
        info = self.info()
        return self.commit(
            self.mgr.alter_sync_state_set(
                B,
                info.masterBrokerId if master is None else master,
                info.masterEpoch if epoch is None else epoch,
                set(ids),
                info.syncStateSetEpoch if set_epoch is None else set_epoch,
                self.hb,
            )
        )


def test_broker_ids_are_allocated_from_one_and_check_codes_guard_them():
    g = Group()
    g.join(3)
    assert g.mgr.get_next_broker_id(C, B).header["nextBrokerId"] == 4
    # the same broker applying again (a crash after apply) keeps its id
    assert g.mgr.apply_broker_id(C, B, 2, "127.0.0.1:10912;2").code == RC.SUCCESS
    # another broker claiming a taken id is refused
    assert (
        g.mgr.apply_broker_id(C, B, 2, "127.0.0.1:9999;7").code == RC.CONTROLLER_BROKER_ID_INVALID
    )
    # a set never seen accepts only the first id
    assert g.mgr.apply_broker_id(C, "b", 2, "x:1;1").code == RC.CONTROLLER_BROKER_ID_INVALID


def test_first_election_compares_offsets_and_new_master_gets_epoch_and_set_of_itself():
    g = Group()
    g.join(3)
    g.beat(1, 0, 100)
    g.beat(2, 0, 500)
    g.beat(3, 0, 300)
    r = g.elect(1)  # RocketMQ would take the asker (1); the longest log wins here
    assert r.code == RC.SUCCESS and r.header["masterBrokerId"] == 2
    assert r.header["masterEpoch"] == 1 and r.header["syncStateSetEpoch"] == 1
    info = g.info()
    assert (info.masterBrokerId, info.masterEpoch, info.syncStateSet) == (2, 1, {2})
    assert r.body["brokerMemberGroup"]["brokerAddrs"]["2"] == "127.0.0.1:10912"
    # asked again with the master alive: MASTER_STILL_EXIST, nothing changes
    assert g.elect(3).code == RC.CONTROLLER_MASTER_STILL_EXIST
    assert g.info().masterEpoch == 1


def test_alter_sync_state_set_checks_in_rocketmq_order():
    g = Group()
    g.join(3)
    for b in (1, 2, 3):
        g.beat(b)
    g.elect(1)
    assert g.alter({1}).code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # same set
    assert g.alter({1, 2}, master=2).code == RC.CONTROLLER_INVALID_MASTER
    assert g.alter({1, 2}, epoch=0).code == RC.CONTROLLER_FENCED_MASTER_EPOCH
    assert g.alter({1, 2}, set_epoch=0).code == RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert g.alter({1, 9}).code == RC.CONTROLLER_INVALID_REPLICAS
    assert g.alter({2, 3}).code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # lacks master
    r = g.alter({1, 2, 3})
    assert r.code == RC.SUCCESS and r.header["newSyncStateSetEpoch"] == 2
    assert g.info().syncStateSet == {1, 2, 3}
    assert g.commit(g.mgr.alter_sync_state_set(B, 1, 1, {1}, 1, g.hb)).code == (
        RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    )


def test_silent_broker_is_not_alive_and_controller_triggered_election_follows_the_set():
    g = Group()
    g.join(3)
    for b in (1, 2, 3):
        g.beat(b, 1, 1000)
    g.elect(1)
    assert g.alter({1, 2}).code == RC.SUCCESS  # 3 is not in sync
    g.beat(3, 1, 5000)  # out of the set, even with more bytes
    g.clock._mono_ms += 11_000  # 1 goes silent; 2 and 3 keep beating
    g.beat(2, 1, 1000)
    g.beat(3, 1, 5000)
    assert not g.hb.is_alive(C, B, 1)
    assert g.mgr.scan_need_reelect(g.hb) == [B]
    r = g.elect(-1)
    assert r.header["masterBrokerId"] == 2  # from the set, not 3
    record = g.sm.records_since(0)[-1][1]
    assert record["kind"] == "elected" and record["unclean"] is False
    assert {c["brokerId"]: c["inSyncStateSet"] for c in record["candidates"]} == {
        1: True,
        2: True,
        3: False,
    }


def test_no_alive_member_of_the_set_clears_master_unless_unclean_is_enabled():
    for unclean in (False, True):
        g = Group(unclean=unclean)
        g.join(2)
        g.beat(1)
        g.beat(2)
        g.elect(1)
        g.clock._mono_ms += 11_000
        g.beat(2, 0, 10)
        r = g.elect(-1)
        kinds = [rec["kind"] for _, rec in g.sm.records_since(0)]
        if unclean:
            assert r.code == RC.SUCCESS and r.header["masterBrokerId"] == 2
            assert kinds[-1] == "elected" and g.sm.records_since(0)[-1][1]["unclean"] is True
        else:
            assert r.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
            assert g.info().masterBrokerId is None and g.info().masterEpoch == 2
            assert kinds[-1] == "election_failed"
            assert g.elect(2).code == RC.CONTROLLER_ELECT_MASTER_FAILED  # broker asked: no event


def test_designated_election():
    g = Group()
    g.join(3)
    for b in (1, 2, 3):
        g.beat(b)
    g.elect(1)
    g.alter({1, 2, 3})
    r = g.elect(3, designate=True)
    assert r.header["masterBrokerId"] == 3 and g.info().masterEpoch == 2
    g.clock._mono_ms += 11_000
    g.beat(3)
    assert g.elect(2, designate=True).code == RC.CONTROLLER_ELECT_MASTER_FAILED  # 2 not alive
    assert g.info().masterBrokerId == 3


def test_clean_broker_data_and_register():
    g = Group()
    g.join(2)
    g.beat(1)
    g.beat(2)
    g.elect(1)
    r = g.mgr.register_broker(C, B, 2, "127.0.0.1:20000", g.hb)
    assert r.header["masterBrokerId"] == 1 and r.body == {
        "syncStateSet": [1],
        "syncStateSetEpoch": 1,
    }
    g.commit(r)
    assert g.sm.tables.replicas[B].address(2) == "127.0.0.1:20000"
    bad = RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert g.mgr.clean_broker_data(C, B, None, False, g.hb).code == bad  # master alive
    assert g.mgr.clean_broker_data(C, B, "2", False, g.hb).code == bad  # 2 alive
    assert g.mgr.clean_broker_data(C, B, "x", True, g.hb).code == bad
    g.commit(g.mgr.clean_broker_data(C, B, "2", True, g.hb))
    assert 2 not in g.sm.tables.replicas[B].brokerIdInfo
    g.commit(g.mgr.clean_broker_data(C, B, None, True, g.hb))
    assert not g.sm.tables.contains(B)
    assert g.mgr.get_replica_info(B).code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_replaying_the_log_or_a_snapshot_gives_the_same_tables():
    g = Group()
    g.join(3)
    for b in (1, 2, 3):
        g.beat(b, 0, b * 10)
    g.elect(1)
    g.alter({1, 2, 3})
    replay = ReplicaTables()
    for data in g.log:
        replay.apply(decode_event(data))
    assert replay.to_snapshot() == g.sm.tables.to_snapshot()
    assert ReplicaTables.from_snapshot(replay.to_snapshot()).to_snapshot() == replay.to_snapshot()


def _rocketmq_compare(o1: Candidate, o2: Candidate) -> int:
    """DefaultElectPolicy's comparator before PR #10579, with Java's int arithmetic."""

    def java_int(x: int) -> int:
        return (x + 2**31) % 2**32 - 2**31

    if o1.epoch == o2.epoch:
        if o1.maxOffset == o2.maxOffset:
            return java_int(o1.priority - o2.priority)
        return java_int(o2.maxOffset - o1.maxOffset)
    return java_int(o2.epoch - o1.epoch)


offsets = st.integers(min_value=0, max_value=2**62)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), offsets, st.integers(0, 2**31 - 1), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.randoms(use_true_random=False),
)
def test_the_chosen_master_has_the_highest_epoch_then_offset_whatever_the_gaps(rows, rnd):
    cands = [
        Candidate(i + 1, f"h:{i}", e, off, off, pri, True, alive)
        for i, (e, off, pri, alive) in enumerate(rows)
    ]
    rnd.shuffle(cands)
    chosen, unclean = choose(cands, old_master=None, designated=None, unclean_allowed=False)
    alive = [c for c in cands if c.alive]
    if not alive:
        assert chosen is None
        return
    best = max((c.epoch, c.maxOffset) for c in alive)
    winner = next(c for c in alive if c.brokerId == chosen)
    assert (winner.epoch, winner.maxOffset) == best and not unclean
    assert min(c.priority for c in alive if (c.epoch, c.maxOffset) == best) == winner.priority


def test_rocketmq_comparator_overflow_is_the_bug_we_avoid():
    short = Candidate(1, "a", 1, 2**31 + 10, 0, 1, True, True)
    long_ = Candidate(2, "b", 1, 2**32 + 20, 0, 1, True, True)
    assert _rocketmq_compare(short, long_) < 0  # Java's order puts the shorter log first
    assert min([short, long_], key=rank_key) is long_
    picked, _ = choose([short, long_], old_master=None, designated=None, unclean_allowed=False)
    assert picked == 2


def test_heartbeat_figures_are_the_latest_report():
    """Not the highest within an epoch, as RocketMQ keeps them: a lost unflushed tail or a cut
    log lowers them (tests/controller/test_sim_findings.py)."""
    g = Group()
    g.beat(1, 2, 500)
    g.beat(1, 2, 100)
    info = g.hb.live_info(C, B, 1)
    assert (info.epoch, info.maxOffset) == (2, 100)
    g.beat(1, 3, 50)
    assert (info.epoch, info.maxOffset) == (3, 50)
    g.clock._mono_ms += 10_000
    assert g.hb.is_alive(C, B, 1)
    g.clock._mono_ms += 1
    assert not g.hb.is_alive(C, B, 1) and g.hb.scan_not_active() == [(C, B, 1)]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("beat"), st.integers(1, 4), st.integers(0, 3), offsets),
        st.tuples(st.just("silence"), st.integers(1, 4)),
        st.tuples(st.just("elect"), st.integers(-1, 4), st.booleans()),
        st.tuples(st.just("alter"), st.sets(st.integers(1, 4), max_size=4)),
        st.tuples(
            st.just("join"),
        ),
        st.tuples(st.just("clean"), st.integers(1, 4)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.booleans())
def test_any_sequence_keeps_the_invariants_and_replays_to_the_same_tables(seq, unclean):
    g = Group(unclean=unclean)
    g.join(2)
    silent: set[int] = set()
    last_epochs = (0, 0)
    for op in seq:
        if op[0] == "beat" and op[1] not in silent:
            g.beat(op[1], op[2], op[3])
        elif op[0] == "silence":
            silent.add(op[1])
            g.clock._mono_ms += 11_000
            for b in range(1, 5):
                if b not in silent and g.hb.live_info(C, B, b):
                    g.hb.live_info(C, B, b).lastUpdateMs = g.clock.monotonic_ms()
        elif op[0] == "elect":
            r = g.elect(op[1], op[2])
            if r.code == RC.SUCCESS:
                chosen = r.header["masterBrokerId"]
                assert g.hb.is_alive(C, B, chosen) or chosen == op[1]
        elif op[0] == "alter" and g.sm.tables.contains(B):
            g.alter(op[1])
        elif op[0] == "join":
            nxt = g.mgr.get_next_broker_id(C, B).header["nextBrokerId"]
            g.commit(g.mgr.apply_broker_id(C, B, nxt, f"h:{nxt};{nxt}"))
        elif op[0] == "clean":
            g.commit(g.mgr.clean_broker_data(C, B, str(op[1]), True, g.hb))
        info = g.sm.tables.sync_states.get(B)
        if info is not None:
            if info.masterBrokerId is not None:
                assert info.masterBrokerId in info.syncStateSet or op[0] == "clean"
            epochs = (info.masterEpoch, info.syncStateSetEpoch)
            assert epochs >= last_epochs or op[0] == "clean"
            last_epochs = epochs
        else:
            last_epochs = (0, 0)
    for _, record in g.sm.records_since(0):
        if record["kind"] != "elected":
            continue
        cands = record["candidates"]
        chosen = next(c for c in cands if c["brokerId"] == record["brokerId"])
        assert chosen["alive"]
        pool = [c for c in cands if c["alive"] and c["inSyncStateSet"]]
        first = not any(c["inSyncStateSet"] for c in cands)
        if record["unclean"]:  # only a designated election may pass over the set's members
            assert not chosen["inSyncStateSet"] and (not pool or record["designated"])
            continue
        assert chosen["inSyncStateSet"] or first
        if not record["designated"] and not first:
            assert (chosen["epoch"], chosen["maxOffset"]) == max(
                (c["epoch"], c["maxOffset"]) for c in pool
            )
    replay = ReplicaTables()
    for data in g.log:
        replay.apply(decode_event(data))
    assert replay.to_snapshot() == g.sm.tables.to_snapshot()


def test_a_closed_channel_ends_a_slave_at_once_and_a_master_at_its_heartbeat_timeout():
    """A master's closed connection may be a cut link while it still holds its lease: it stays
    alive (no election) until its heartbeat timeout, by which its lease has ended."""
    g = Group()
    master_conn, slave_conn = object(), object()
    g.hb.on_heartbeat(C, B, "127.0.0.1:1", 1, timeout_ms=3000, channel=master_conn)
    g.hb.on_heartbeat(C, B, "127.0.0.1:2", 2, timeout_ms=3000, channel=slave_conn)
    masters = frozenset({(C, B, 1)})
    assert g.hb.on_channel_close(slave_conn, masters) == [(C, B, 2)]
    assert not g.hb.is_alive(C, B, 2)
    assert g.hb.on_channel_close(master_conn, masters) == []
    g.clock._mono_ms += 3000
    assert g.hb.is_alive(C, B, 1)
    g.clock._mono_ms += 1
    assert not g.hb.is_alive(C, B, 1) and g.hb.scan_not_active() == [(C, B, 1)]
