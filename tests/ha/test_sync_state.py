"""The master's SyncStateSet upkeep (broker/ha/sync_state.py), pure, on a DrivenClock: shrink
after haMaxTimeSlaveNotCatchup, expand when caught up, acks over the union while a change is in
flight, confirmOffset, allAckInSyncStateSet and minInSyncReplicas; and, over any sequence of
transfers, acks, disconnects, ticks, shrinks and controller answers, no byte acknowledged under
allAckInSyncStateSet is missing from a member of the set the controller holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.clock import DrivenClock
from broker.ha.sync_state import IN_SYNC_REPLICAS_NOT_ENOUGH, SyncStateConfig, SyncStateSet

ALL_ACK = SyncStateConfig(all_ack_in_sync_state_set=True, min_in_sync_replicas=2)


def make(config=ALL_ACK, members=(0, 1, 2)) -> SyncStateSet:
    return SyncStateSet(0, frozenset(members), config, DrivenClock())


def tick(sss: SyncStateSet, ms: float) -> None:
    sss.clock._mono_ms += ms  # the driven clock's time, as the controller tests move it


def test_a_slave_not_caught_up_for_ha_max_time_leaves_and_returns_when_caught_up():
    sss = make()
    for s in (1, 2):
        sss.on_transfer(s, 1000)
        assert sss.on_ack(s, 1000, 1000) is None  # already members
    tick(sss, 10_000)
    sss.on_transfer(1, 5000)
    sss.on_ack(1, 5000, 5000)  # 1 keeps up; 2 stops acking
    sss.on_transfer(2, 5000)
    tick(sss, 5_000)
    assert sss.shrink() is None  # 2 last caught up 15.0 s ago: not longer than the limit
    tick(sss, 1)
    assert sss.shrink() == {0, 1}
    # while the change is in flight, 2 still counts: a put is acknowledged only with its ack
    assert sss.union == {0, 1, 2} and not sss.acknowledged(5000)
    sss.applied({0, 1}, 5000)
    assert sss.acknowledged(5000) and sss.confirm_offset(5000) == 5000
    # 2 catches up: it is proposed again, and counts at once
    sss.on_transfer(2, 6000)
    sss.on_ack(1, 6000, 6000)
    assert sss.on_ack(2, 6000, 6000) == {0, 1, 2}
    assert not sss.acknowledged(6001) and sss.acknowledged(6000)


def test_a_slave_behind_the_master_the_confirm_offset_or_the_epoch_start_does_not_join():
    sss = make(members=(0, 1))
    sss.on_transfer(1, 4000)
    sss.on_ack(1, 4000, 4000)
    assert sss.confirm == 4000
    sss.on_transfer(2, 4000)
    assert sss.on_ack(2, 3500, 4000) is None  # behind what it was sent, and below confirm
    # a new master whose set's other member has not connected yet: confirm stays 0
    sss = make(members=(0, 1))
    sss.epoch_start_offset = 3000
    sss.on_transfer(2, 2500)
    assert sss.on_ack(2, 2500, 2500) is None and sss.confirm == 0  # below the epoch's start
    sss.on_transfer(2, 3200)
    assert sss.on_ack(2, 3200, 3200) == {0, 1, 2}
    assert sss.on_ack(2, 3200, 3200) is None  # already in flight: not proposed twice
    assert sss.on_disconnect(1) is None  # one change in flight at a time
    sss.applied({0, 1, 2}, 3200)
    assert sss.shrink() == {0, 2}  # 1 has no connection: the next shrink removes it


def test_a_closed_connection_leaves_at_once_and_freezes_the_confirm_offset():
    sss = make()
    for s in (1, 2):
        sss.on_transfer(s, 800)
        sss.on_ack(s, 800, 800)
    assert sss.confirm == 800
    assert sss.on_disconnect(2) == {0, 1}
    sss.on_ack(1, 900, 900)
    assert sss.confirm == 800  # 2 is still in the set and has no connection (RocketMQ #6662)
    sss.applied({0, 1}, 900)
    assert sss.confirm == 900


def test_min_in_sync_replicas_refuses_puts_when_the_set_is_too_small():
    sss = make(members=(0, 1))
    assert sss.admit_put() is None
    sss.shrink()  # 1 never connected: it leaves
    assert sss.in_sync_replicas() == 2  # the larger of set and proposal while in flight
    sss.applied({0}, 0)
    assert sss.admit_put() == IN_SYNC_REPLICAS_NOT_ENOUGH
    assert not sss.acknowledged(10**9)  # admitted before: not answered from one disk


def test_without_all_ack_in_sync_replicas_counts_acks_with_the_master():
    sss = make(SyncStateConfig(in_sync_replicas=2), members=(0, 1, 2))
    sss.on_transfer(3, 100)
    sss.on_ack(3, 100, 100)  # any connected slave counts, in the set or not
    assert sss.acknowledged(100) and not sss.acknowledged(101)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 500)),
        st.tuples(st.just("transfer"), st.integers(1, 3)),
        st.tuples(st.just("ack"), st.integers(1, 3), st.integers(0, 1000)),
        st.tuples(st.just("idle"), st.integers(1, 3)),
        st.tuples(st.just("disconnect"), st.integers(1, 3)),
        st.tuples(st.just("tick"), st.integers(0, 20_000)),
        st.tuples(st.just("shrink")),
        st.tuples(st.just("answer"), st.booleans()),
        st.tuples(st.just("put"), st.integers(0, 600)),
    ),
    max_size=80,
)


@settings(max_examples=1500, deadline=None)
@given(OPS, st.sets(st.integers(1, 3)))
def test_no_acknowledged_byte_is_missing_from_a_member(ops, first_members):
    sss = make(members={0} | first_members)
    master_max = 0
    held = {s: 0 for s in (1, 2, 3)}  # what each slave's log holds (its highest ack)
    connected: dict[int, int] = {}  # slave -> its ack on this connection (-1: none yet)
    acked_max, confirms = 0, [0]
    for m in first_members:  # the first set's members hold everything so far (nothing)
        held[m] = 0
    for op in ops:
        kind = op[0]
        if kind == "write":
            master_max += op[1]
        elif kind == "transfer":
            connected.setdefault(op[1], -1)
            sss.on_transfer(op[1], master_max)
        elif kind == "ack" and op[1] in connected:
            ack = min(max(op[2], held[op[1]], connected[op[1]]), master_max)  # logs only grow
            held[op[1]] = connected[op[1]] = ack
            sss.on_ack(op[1], ack, master_max)
        elif kind == "idle" and op[1] in connected and connected[op[1]] == master_max:
            sss.on_idle(op[1])
        elif kind == "disconnect":
            connected.pop(op[1], None)
            sss.on_disconnect(op[1])
        elif kind == "tick":
            tick(sss, op[1])
        elif kind == "shrink":
            before, in_flight = sss.clock.monotonic_ms(), sss.proposed
            proposal = sss.shrink()
            if in_flight is None:  # one change in flight at a time: shrink waits for the answer
                for m in (proposal or sss.members) - {0}:
                    assert m in connected and before - sss.caught_up_ms[m] <= 15_000
            else:
                assert proposal is None and sss.proposed == in_flight
        elif kind == "answer" and sss.proposed is not None:
            if op[1]:
                sss.applied(sss.proposed, master_max)
            else:
                sss.rejected()
        elif kind == "put" and op[1] <= master_max:
            # the offset the waiting puts are released at says the same as acknowledged()
            assert sss.acknowledged(op[1]) == (op[1] <= sss.acknowledged_offset())
            if sss.acknowledged(op[1]):
                acked_max = max(acked_max, op[1])
        confirms.append(sss.confirm_offset(master_max))
        assert 0 in sss.members and 0 in sss.union
        assert confirms[-1] >= confirms[-2] and confirms[-1] <= master_max
        for m in sss.members - {0}:  # the controller's set: every acknowledged byte
            assert held[m] >= acked_max, (m, held, acked_max)
            if len(sss.members) > 1:
                assert held[m] >= sss.confirm, (m, held, sss.confirm)
        assert (sss.admit_put() is None) == (sss.in_sync_replicas() >= 2)
