"""Fault classes of the logs themselves, of failovers and of committed offsets, each builder
returning its :class:`~tests.faults.generator.Case` with the truth."""

from __future__ import annotations

from hypothesis import strategies as st

from contracts import audit_tables as at
from tests.faults.cases_objects import base_log, bit, clean_pair, flip_target, pick_message
from tests.faults.generator import (
    CGROUP,
    EVENT_MS,
    MASTER,
    MAX_LAG_BYTES,
    PAIR,
    SLAVE,
    SNAP1_MS,
    SNAP2_MS,
    Between,
    Builder,
    Case,
    Contains,
    OneOf,
    Suffix,
    Witness,
    truth,
)
from tests.faults.logbytes import TOPIC, Rec, flipped, make_log, shift_queue_offsets

AI, RC, AD, LI, OM = at.CHECKS
FAIL, PASS = at.STATUS_FAIL, at.STATUS_PASS


def crc_issue(b: Builder, node: str, rec: Rec) -> Witness:
    """The record's CRC failure on ``node``, named by the chunk object that holds it."""
    (key,) = [b.chunk_key(node, c) for c in b.chunks(node) if c.start <= rec.offset < c.end]
    return Witness(
        "records_issues",
        {
            "node": node,
            "offset": rec.offset,
            "check": "crc_mismatch",
            "topic": rec.topic,
            "queue_id": rec.queue_id,
            "queue_offset": rec.queue_offset,
            "msg_id": rec.msg_id,
            "key": key,
        },
    )


# -- replicas -------------------------------------------------------------------------------


def divergent(b: Builder, draw, variant: str = "") -> Case:
    """One bit flipped on the slave before it shipped (its manifests agree with its bytes):
    the pair diverges at exactly that byte; a body flip also fails the record's CRC."""
    log = base_log(b)
    rec = pick_message(log, draw)
    region = draw(st.sampled_from(("body", "properties", "store_ts")), label="region")
    at_ = flip_target(log, rec, region, draw)
    b.pair(log, flipped(log, at_, bit(draw, region)))
    b.evidence(log, ack=log.end)
    body = region == "body"
    return Case(
        "divergent",
        b.group,
        truth(**{RC: FAIL, AD: FAIL, LI: FAIL if body else PASS}),
        witnesses=[Witness("ranges", {"pair": PAIR, "verdict": at.DIVERGENT, "first_diff": at_})]
        + ([crc_issue(b, SLAVE, rec)] if body else []),
        forbid=[Witness("records_issues", {"node": MASTER})],
        placement={"offset": at_, "region": region, "record": rec.offset},
    )


def replicated_corruption(b: Builder, draw, variant: str = "") -> Case:
    """A body flipped on the master and replicated as is: the replicas agree, the CRC fails on
    both nodes at that record."""
    log = base_log(b)
    rec = pick_message(log, draw)
    at_ = flip_target(log, rec, "body", draw)
    bad = flipped(log, at_, bit(draw))
    b.pair(bad, bad)
    b.evidence(bad, ack=bad.end)
    return Case(
        "replicated-corruption",
        b.group,
        truth(**{LI: FAIL}),
        witnesses=[crc_issue(b, MASTER, rec), crc_issue(b, SLAVE, rec)],
        forbid=[Witness("ranges", {"verdict": at.DIVERGENT})],
        placement={"offset": at_, "record": rec.offset},
    )


def lag(b: Builder, draw, variant: str = "") -> Case:
    """The slave ends at a record boundary behind the master (it acknowledged what it has):
    ``lag`` at the tail, within or beyond the run's ``max_lag_bytes``."""
    s = b.shape
    n = s.n
    log = make_log(n, s.body_len, s.queues)
    while log.end < 3 * MAX_LAG_BYTES:
        n += 10
        log = make_log(n, s.body_len, s.queues)
    beyond = variant == "beyond"
    cuts = [c for c in log.boundaries()[1:-1] if (log.end - c > MAX_LAG_BYTES) == beyond]
    cut = draw(st.sampled_from(cuts), label="slave end")
    b.pair(log, log.cut(cut))
    b.evidence(log, ack=cut)
    row = {"pair": PAIR, "start": cut, "end": log.end, "verdict": at.LAG, "lag_exceeded": beyond}
    return Case(
        "lag-beyond" if beyond else "lag-within",
        b.group,
        truth(**{RC: FAIL if beyond else PASS}),
        witnesses=[Witness("ranges", row)],
        placement={"cut": cut, "lag": log.end - cut},
    )


def conflict(b: Builder, draw, variant: str = "") -> Case:
    """The slave uploads a record's offsets twice in one epoch, the second time with its store
    timestamp changed: two chunks of one node and epoch hold different bytes."""
    log = clean_pair(b)
    rec = pick_message(log, draw)
    at_ = flip_target(log, rec, "store_ts", draw)
    taken = {(c.start, c.end) for c in b.chunks(SLAVE)}
    start, end = next(
        (s, e)
        for s in reversed([x for x in log.boundaries() if x <= rec.offset])
        for e in log.boundaries()
        if e > rec.offset and (s, e) not in taken
    )  # a key no chunk of the node has yet (objects are immutable)
    other = flipped(log, at_, bit(draw)).cut(end)
    b.ship(other, SLAVE, "SLAVE", 1, chunk=1 << 20, start=start)
    return Case(
        "conflict",
        b.group,
        truth(**{RC: FAIL, AD: None}),
        witnesses=[Witness("ranges", {"verdict": at.CONFLICT, "first_diff": at_})],
        placement={"offset": at_, "chunk": (start, end)},
    )


# -- failover -------------------------------------------------------------------------------


def failover(b: Builder, draw, variant: str = "") -> Case:
    """a-0, master in epoch 0, dies with a tail a-1 never received; a-1 is promoted (epoch 1)
    and takes traffic; a-0 rejoins as its slave, truncates the tail and replicates epoch 1.
    The tail is an allowed ``extra`` when every acknowledged offset is below the cut; an
    acknowledgement above it is data loss: an ``extra`` from the cut past the ack that is not
    allowed (only bytes at or above the ack may be excused). Offsets are committed on both
    epochs."""
    s = b.shape
    old = make_log(max(s.n, 6), s.body_len, s.queues)
    msgs = old.messages()
    cut = draw(st.sampled_from([r.offset for r in msgs[len(msgs) // 3 :]]), label="cut")
    new = make_log(
        draw(st.integers(2, 20), label="new messages"),
        s.body_len,
        s.queues,
        tag="e1",
        base=old.cut(cut),
    )
    kind = variant
    ack = cut
    if kind == "acked-loss":
        ack = draw(st.sampled_from([e for e in old.boundaries() if e > cut]), label="ack")
    b.ship(old, MASTER, "SYNC_MASTER", 0, s.chunk_m)
    b.ship(old.cut(cut), SLAVE, "SLAVE", 1, s.chunk_s)
    before = {q: (v + 1) // 2 for q, v in old.cut(cut).queue_max().items()}
    snap = b.snapshot(MASTER, SNAP1_MS, old, before, slaves={SLAVE: ack})
    b.arch.event(SLAVE, "role_changed", EVENT_MS, epoch=1, **{"from": "SLAVE", "to": "SYNC_MASTER"})
    b.ship(new, SLAVE, "SYNC_MASTER", 0, s.chunk_s, epoch=1, start=cut)
    after = dict(new.queue_max())
    if kind == "offset-regression":
        q = draw(st.sampled_from(sorted(q for q, v in before.items() if v > 0)), label="queue")
        after[q] = draw(st.integers(0, before[q] - 1), label="regressed to")
    b.snapshot(SLAVE, SNAP2_MS, new, after, slaves={MASTER: new.end}, epoch=1)
    b.ship(new, MASTER, "SLAVE", 1, s.chunk_m, epoch=1, start=cut, truncate_to=cut)
    tail = {"pair": f"{SLAVE}->{MASTER}", "start": cut, "end": old.end, "verdict": at.EXTRA}
    placement = {"cut": cut, "old_end": old.end, "new_end": new.end, "ack": ack}
    if kind == "clean":
        return Case(
            "failover-clean",
            b.group,
            truth(),
            witnesses=[Witness("ranges", {**tail, "allowed": True}), *_epochs(b.group)],
            placement=placement,
        )
    if kind == "acked-loss":
        loss = {"lost_start": cut, "lost_end": ack, "snapshot": Suffix(snap.split("/", 3)[3])}
        # [cut, ack) is not excused; the row may run on to the tail's end, and only bytes at
        # or above the ack may be an allowed extra
        acked = {**tail, "end": Between(ack, old.end), "allowed": False}
        excused_early = {**tail, "start": Between(cut, ack - 1), "allowed": True}
        del excused_early["end"]
        return Case(
            "failover-acked-loss",
            b.group,
            truth(**{RC: FAIL, AD: FAIL}),
            witnesses=[Witness("acked_losses", loss), Witness("ranges", acked)],
            forbid=[Witness("ranges", excused_early)],
            placement=placement,
        )
    row = {
        "kind": "regression",
        "group_name": CGROUP,
        "topic": TOPIC,
        "queue_id": q,
        "before": before[q],
        "after": after[q],
        "node_before": MASTER,
        "epoch_before": 0,
        "node_after": SLAVE,
        "epoch_after": 1,
        "at_before": SNAP1_MS,
        "at_after": SNAP2_MS,
        "reconsumed_messages": before[q] - after[q],
        "failover": Contains(SLAVE),
    }  # fmt: skip  (the promotion between the two points)
    return Case(
        "failover-offset-regression",
        b.group,
        truth(**{OM: FAIL}),
        witnesses=[Witness("offset_violations", row)],
        placement=placement,
    )


def _epochs(group: str) -> list[Witness]:
    """Offset points on both sides of the failover."""
    return [
        Witness("offset_timeline", {"node": MASTER, "epoch": 0, "group_name": CGROUP}),
        Witness("offset_timeline", {"node": SLAVE, "epoch": 1, "group_name": CGROUP}),
    ]


# -- offsets and queues ---------------------------------------------------------------------


def offsets(b: Builder, draw, variant: str = "") -> Case:
    """Committed offsets on the master: a regression with or without an ``offset_reset``
    event, or an offset beyond its queue's max."""
    log = base_log(b)
    b.pair(log, log)
    qmax = log.queue_max()
    q = draw(st.sampled_from(sorted(qmax)), label="queue")
    first, second = {p: v // 2 for p, v in qmax.items()}, dict(qmax)
    kind = variant
    if kind == "beyond":
        second[q] = qmax[q] + draw(st.integers(1, 1000), label="beyond by")
    else:
        first[q] = draw(st.integers(1, qmax[q]), label="before")
        second[q] = draw(st.integers(0, first[q] - 1), label="after")
    b.snapshot(MASTER, SNAP1_MS, log, first, slaves={SLAVE: log.end})
    b.snapshot(MASTER, SNAP2_MS, log, second, slaves={SLAVE: log.end})
    row = {
        "kind": "regression",
        "group_name": CGROUP,
        "topic": TOPIC,
        "queue_id": q,
        "before": first[q],
        "after": second[q],
        "node_before": MASTER,
        "node_after": MASTER,
        "at_before": SNAP1_MS,
        "at_after": SNAP2_MS,
        "reconsumed_messages": first[q] - second[q],
    }
    placement = {"queue": q, "before": first[q], "after": second[q], "max": qmax[q]}
    if kind == "reset":
        b.arch.event(
            MASTER,
            "offset_reset",
            EVENT_MS,
            group=CGROUP,
            topic=TOPIC,
            queue=q,
            **{"from": first[q], "to": second[q]},
        )
        return Case(
            "offset-reset",
            b.group,
            truth(),
            forbid=[Witness("offset_violations", {"queue_id": q})],
            placement=placement,
        )
    if kind == "beyond":
        row.update(kind="beyond_queue_max", before=qmax[q])
        for col in ("node_before", "at_before", "reconsumed_messages"):
            del row[col]
    return Case(
        f"offset-{kind}",
        b.group,
        truth(**{OM: FAIL}),
        witnesses=[Witness("offset_violations", row)],
        placement=placement,
    )


def queue_gap(b: Builder, draw, variant: str = "") -> Case:
    """A record's queue offset one above its predecessor's next (both nodes, written so: the
    manifests agree): log integrity names the record, its queue and the expected value."""
    log = base_log(b)
    rec = draw(st.sampled_from([r for r in log.messages() if r.queue_offset > 0]), label="rec")
    gap = shift_queue_offsets(log, rec, by=draw(st.integers(1, 5), label="gap"))
    b.pair(gap, gap)
    b.evidence(gap, ack=gap.end)
    found = gap.record_at(rec.offset).queue_offset

    def chunk_start(node: str) -> int:  # the contract allows the gap's chunk as its offset
        return max(c.start for c in b.chunks(node) if c.start <= rec.offset)

    witnesses = [
        Witness(
            "records_issues",
            {
                "node": node,
                "check": "queue_offset_gap",
                "topic": TOPIC,
                "queue_id": rec.queue_id,
                "queue_offset": found,
                "msg_id": rec.msg_id,
                "offset": OneOf((rec.offset, chunk_start(node))),
                "expected": rec.queue_offset,
                "found": found,
            },
        )
        for node in (MASTER, SLAVE)
    ]
    return Case(
        "queue-offset-gap",
        b.group,
        truth(**{LI: FAIL}),
        witnesses=witnesses,
        placement={"record": rec.offset, "queue": rec.queue_id, "found": found},
    )
