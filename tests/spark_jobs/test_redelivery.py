"""Redeliveries counted exactly: a simulated consumer (sent every message it commits past)
meets resets and failover rollbacks at places Hypothesis picks; the count from its commit
records equals the simulation's messages sent more than once."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.offset_commits.model import OffsetCommit
from spark_jobs.redelivery import redeliveries

steps = st.lists(
    st.one_of(
        st.tuples(st.just("consume"), st.integers(1, 6)),
        st.tuples(st.just("reset"), st.integers(0, 40)),
        st.tuples(st.just("rollback"), st.integers(1, 3)),  # lose the last n commits
    ),
    max_size=30,
)


class Log:
    """A commit log of one group's records: appended at growing physical offsets; a failover
    truncates the last records and appends the next in a new epoch from the cut."""

    def __init__(self) -> None:
        self.records: list[tuple] = []  # every record ever written, in log order
        self.live: list[tuple] = []  # what the current master holds
        self.epoch = 0

    def append(self, kind: str, value: int) -> None:
        extra = {"previous": {0: 0}, "by": "admin"} if kind == "reset" else {}
        off = self.live[-1][1] + 100 if self.live else 0
        c = OffsetCommit(kind, "g", "T", {0: value}, self.epoch, 0, "h:1", **extra)
        self.live.append((self.epoch, off, "n", 0, c))
        self.records.append(self.live[-1])

    def fail_over(self, n: int) -> int:
        """Lose the last ``n`` records; the value the new master holds."""
        del self.live[-n:]
        self.epoch += 1
        return self.live[-1][4].offsets[0]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 20), steps)
def test_redelivered_equals_the_simulated_resends(start: int, plan) -> None:
    sent: Counter[int] = Counter()
    log = Log()
    log.append("reset", start)  # where the group starts
    position = start
    for op, n in plan:
        if op == "consume":
            sent.update(range(position, position + n))
            position += n
            log.append("commit", position)
        elif op == "reset":
            position = n
            log.append("reset", n)
        elif len(log.live) > n:  # a failover takes the last n records back: the consumer
            position = log.fail_over(n)  # resumes from what the new master answers
    ordered = sorted(log.records, key=lambda r: (r[0], r[1]))
    got = redeliveries(ordered).get(("g", "T", 0), {"redelivered": 0})["redelivered"]
    assert got == sum(c - 1 for c in sent.values())
