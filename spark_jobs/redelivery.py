"""Messages a consumer group was sent again because its committed offset moved back (a reset
record, or a rollback after a failover), counted from the commit records alone.

Each (group, topic, queue)'s commits, in log order, form segments: a segment starts at its
first value and at every value lower than the one before it or carried by a reset; it covers the
queue offsets ``[start, highest value committed in it)``, which the consumer was certainly sent
(it committed past them). Every offset covered by a segment and by an earlier one was sent again:
``redelivered`` is the sum, over segments, of their overlap with all earlier segments. It is a
lower bound (a rewind the consumer never committed past counts only as far as it committed).

A failover moves offsets back too: a new epoch's log begins at its first record (or its known
start offset), so the old master's records at or beyond it left the log; each queue goes back
to the value of its last surviving record (a new segment), even when the next commit carries
no lower value.
"""

from __future__ import annotations


def _overlap(covered: list[tuple[int, int]], a: int, b: int) -> int:
    """How much of ``[a, b)`` the disjoint, sorted intervals ``covered`` hold."""
    return sum(max(0, min(b, hi) - max(a, lo)) for lo, hi in covered)


def _merge(covered: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted([*covered, (a, b)]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


#: the newest records per queue kept to replay a truncation (a failover cuts only a tail)
TAIL_RECORDS_MAX = 4096


class _Queue:
    def __init__(self) -> None:
        self.covered: list[tuple[int, int]] = []
        self.start = self.high = self.prev = None
        self.redelivered = 0
        self.rewinds = 0
        self.tail: list[tuple[int, int]] = []  # (log offset, value) of the live log's records

    def close(self) -> None:
        if self.start is not None and self.high > self.start:
            self.redelivered += _overlap(self.covered, self.start, self.high)
            self.covered = _merge(self.covered, self.start, self.high)

    def see(self, value: int, new_segment: bool) -> None:
        if self.prev is None or new_segment or value < self.prev:
            self.close()
            self.rewinds += self.prev is not None and value < self.prev
            self.start = self.high = value
        self.high = max(self.high, value)
        self.prev = value

    def record(self, log_offset: int, value: int, reset: bool) -> None:
        self.see(value, reset)
        self.tail.append((log_offset, value))
        if len(self.tail) > TAIL_RECORDS_MAX:
            del self.tail[: len(self.tail) // 2]

    def truncate(self, cut: int) -> None:
        """A new epoch's log starts at ``cut``: records at or beyond it are gone, the queue
        holds the value of the last one before it (a new segment from there)."""
        if not self.tail or self.tail[-1][0] < cut:
            return
        while self.tail and self.tail[-1][0] >= cut:
            self.tail.pop()
        if self.tail:
            self.see(self.tail[-1][1], True)
        else:  # nothing committed survived: the next commit starts a segment
            self.close()
            self.start = self.high = self.prev = None


def epoch_cuts(ordered: list[tuple], epoch_starts: dict[int, int] | None = None) -> dict:
    """Where each epoch's log begins: its first record, or its start offset if known."""
    starts = dict(epoch_starts or {})
    for epoch, off, *_ in ordered:
        starts[epoch] = min(starts.get(epoch, off), off)
    return starts


def redeliveries(
    ordered: list[tuple], epoch_starts: dict[int, int] | None = None
) -> dict[tuple[str, str, int], dict]:
    """Per (group, topic, queue): ``redelivered`` messages and ``rewinds`` (moves back), from
    ``commit_history.ordered_records`` (epoch, offset, node, at, OffsetCommit)."""
    queues: dict[tuple[str, str, int], _Queue] = {}
    cuts = epoch_cuts(ordered, epoch_starts)
    epoch = None
    for rec_epoch, off, _node, _at, c in ordered:
        if rec_epoch != epoch:
            if epoch is not None:
                for st in queues.values():
                    st.truncate(cuts[rec_epoch])
            epoch = rec_epoch
        for q, value in sorted(c.offsets.items()):
            queues.setdefault((c.group, c.topic, q), _Queue()).record(off, value, c.is_reset)
    out = {}
    for key, st in sorted(queues.items()):
        st.close()
        out[key] = {"redelivered": st.redelivered, "rewinds": st.rewinds}
    return out
