"""Check 4's ``lost`` rows (``offset_monotonicity.lost_at_failover``): a committed offset the
next master holds no entry for. Pure Python over snapshots (no Spark)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.archive_layout import Snapshot
from spark_jobs.offset_monotonicity import LOST_GRACE_MS, lost_at_failover


def snap(node: str, epoch: int, at: int, offsets: dict[int, int], role: str = "SYNC_MASTER"):
    table = {"T@G": {str(q): o for q, o in offsets.items()}} if offsets else {}
    return Snapshot(
        node=node,
        brokerName="b",
        brokerId=0,
        role=role,
        epoch=epoch,
        takenAt=at,
        maxPhyOffset=0,
        flushedOffset=0,
        confirmOffset=0,
        consumerOffsets=table,
        queueMaxOffsets={},
    )


def lost(snapshots, events=(), seeds=()):
    rows = lost_at_failover(list(seeds), list(snapshots), list(events))
    return [(r["queue_id"], r["before"], r["node_after"], r["at_after"]) for r in rows]


def test_an_entry_the_next_master_never_holds_is_lost_once() -> None:
    snaps = [
        snap("a", 1, 0, {0: 5, 1: 3}),
        snap("b", 2, 10_000, {1: 3}),
        snap("b", 2, 70_000, {1: 4}),
    ]
    assert lost(snaps) == [(0, 5, "b", 10_000)]


def test_an_entry_applied_within_the_grace_is_not_lost() -> None:
    snaps = [
        snap("a", 1, 0, {0: 5}),
        snap("b", 2, 10_000, {}),
        snap("b", 2, 10_000 + LOST_GRACE_MS, {0: 5}),
    ]
    assert lost(snaps) == []
    late = [
        snap("a", 1, 0, {0: 5}),
        snap("b", 2, 10_000, {}),
        snap("b", 2, 20_000, {}),
        snap("b", 2, 30_000, {0: 9}),
    ]
    assert lost(late) == [(0, 5, "b", 10_000)]  # judged at its first snapshot after the grace


def test_same_master_cleanup_slaves_and_resets_are_not_lost() -> None:
    same = [snap("a", 1, 0, {0: 5}), snap("a", 1, 60_000, {})]
    assert lost(same) == []  # a cleanup under one master (RocketMQ's topic deletion)
    slave = [snap("a", 1, 0, {0: 5}), snap("b", 1, 60_000, {}, role="SLAVE")]
    assert lost(slave) == []
    reset = {"kind": "offset_reset", "at": 5_000, "group": "G", "topic": "T", "queue": 0}
    assert lost([snap("a", 1, 0, {0: 5}), snap("b", 2, 10_000, {})], [reset]) == []
    other = {**reset, "queue": 1}
    assert lost([snap("a", 1, 0, {0: 5}), snap("b", 2, 10_000, {})], [other]) == [
        (0, 5, "b", 10_000)
    ]


def test_the_last_run_s_points_seed_the_judgement() -> None:
    seeds = [snap("a", 1, 0, {0: 5})]
    assert lost([snap("b", 2, 10_000, {})], seeds=seeds) == [(0, 5, "b", 10_000)]
    assert lost([snap("a", 1, 10_000, {})], seeds=seeds) == []  # the same master


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("ab"), st.dictionaries(st.integers(0, 2), st.integers(0, 9))),
        min_size=1,
        max_size=8,
    )
)
def test_lost_exactly_when_a_new_term_holds_no_entry(terms) -> None:
    """One snapshot per term, a minute apart, the epoch rising at each: a queue is lost at a
    term exactly when the term before held it (or held it last) and this one does not."""
    snaps = [snap(node, i + 1, i * 60_000, offs) for i, (node, offs) in enumerate(terms)]
    expected, last = [], {}
    for i, (node, offs) in enumerate(terms):
        for q in sorted(last):
            if q not in offs:
                expected.append((q, last.pop(q), node, i * 60_000))
        last.update(offs)
    assert sorted(lost(snaps)) == sorted(expected)
