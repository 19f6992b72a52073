"""Check 4, offset monotonicity: per (group, topic, queue), the committed offset of the node that
was master at each snapshot never goes backwards, except by a recorded ``offset_reset``; no
committed offset exceeds its queue's max offset.

read: snapshots and events (small JSON, listed by the driver) as DataFrames;
transform: a window per (group, topic, queue) ordered by snapshot time, joined with resets and
failovers between consecutive master snapshots; write: ``offset_timeline`` and
``offset_violations``.
"""

from __future__ import annotations

from contracts.archive_layout import Snapshot

TIMELINE_SCHEMA = (
    "taken_at long, node string, role string, epoch long, group_name string, topic string, "
    "queue_id int, committed long, queue_max long"
)


def timeline_rows(snapshots: list[Snapshot]) -> list[tuple]:
    rows = []
    for s in snapshots:
        for key, queues in s.consumerOffsets.items():
            topic, _, group = key.partition("@")
            for q, off in queues.items():
                qmax = s.queueMaxOffsets.get(topic, {}).get(str(q))
                rows.append(
                    (
                        s.takenAt,
                        s.node,
                        s.role,
                        s.epoch,
                        group,
                        topic,
                        int(q),
                        int(off),
                        None if qmax is None else int(qmax),
                    )
                )
    return rows


TIMELINE_COLUMNS = [c.split()[0] for c in TIMELINE_SCHEMA.split(", ")]


def has_points(snapshots: list[Snapshot]) -> bool:
    """Whether any snapshot holds a committed offset (a timeline row)."""
    return any(queues for s in snapshots for queues in s.consumerOffsets.values())


def timeline_table(snapshots: list[Snapshot]):
    """The timeline rows as an Arrow table (``TIMELINE_SCHEMA``), built a snapshot at a time:
    a year of snapshots is millions of rows, which as Python tuples (and again as Spark's
    pickled copy of them) held gigabytes of the driver."""
    import pyarrow as pa

    cols: list[list] = [[] for _ in TIMELINE_COLUMNS]
    for s in snapshots:
        for row in timeline_rows([s]):
            for col, v in zip(cols, row, strict=True):
                col.append(v)
    types = [
        pa.int64(),
        pa.string(),
        pa.string(),
        pa.int64(),
        pa.string(),
        pa.string(),
        pa.int32(),
        pa.int64(),
        pa.int64(),
    ]
    return pa.table(
        {n: pa.array(c, t) for n, c, t in zip(TIMELINE_COLUMNS, cols, types, strict=True)}
    )


def empty_timeline():
    return timeline_table([])


def master_points(timeline) -> int:
    """Rows of a timeline table taken from a master (the points the check judged)."""
    import pyarrow.compute as pc

    return int(pc.sum(pc.not_equal(timeline["role"], "SLAVE")).as_py() or 0)


def timeline_last_rows(timeline) -> list[dict]:
    """The rows of a timeline table that the next run's state keeps, in the table's order:
    per (group, topic, queue) the last row of each node and the last row of a master (what
    ``incremental.next_state`` reads from the whole timeline, taken in time order)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    order = pc.sort_indices(timeline, [("taken_at", "ascending")])  # stable: ties keep order
    last: dict[tuple, int] = {}
    keys = timeline.select(["group_name", "topic", "queue_id", "node", "role"])
    keys = keys.take(order).to_pydict()
    for i, (g, t, q, n, role) in enumerate(
        zip(
            keys["group_name"],
            keys["topic"],
            keys["queue_id"],
            keys["node"],
            keys["role"],
            strict=True,
        )
    ):
        last[(g, t, q, n)] = i
        if role != "SLAVE":
            last[(g, t, q, "\0master")] = i
    if not last:
        return []
    picked = pa.array(sorted(set(last.values())), pa.int64())
    return timeline.take(order.take(picked)).to_pylist()


def reset_rows(events: list[dict]) -> list[tuple[int, str, str, int]]:
    """(at, group, topic, queue) of every ``offset_reset`` event: what both checks excuse."""
    return [
        (int(e["at"]), e["group"], e["topic"], int(e["queue"]))
        for e in events
        if e["kind"] == "offset_reset"
    ]


def failover_rows(events: list[dict]) -> list[tuple[int, str, int, str]]:
    """(at, node, epoch, "from->to") of every ``role_changed`` event: what both checks name."""
    return [
        (int(e["at"]), e["node"], int(e["epoch"]), f"{e.get('from')}->{e.get('to')}")
        for e in events
        if e["kind"] == "role_changed"
    ]


def run_offset_monotonicity(spark, snapshots: list[Snapshot], events: list[dict]):
    """Returns (timeline DataFrame, violations DataFrame)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    timeline = spark.createDataFrame(timeline_table(snapshots), TIMELINE_SCHEMA)
    resets = spark.createDataFrame(
        reset_rows(events), "reset_at long, r_group string, r_topic string, r_queue int"
    )
    failovers = spark.createDataFrame(
        failover_rows(events), "fo_at long, fo_node string, fo_epoch long, fo_change string"
    )
    masters = timeline.where(F.col("role") != "SLAVE")
    w = Window.partitionBy("group_name", "topic", "queue_id").orderBy("taken_at", "node")
    steps = (
        masters.withColumn("prev_committed", F.lag("committed").over(w))
        .withColumn("prev_at", F.lag("taken_at").over(w))
        .withColumn("prev_node", F.lag("node").over(w))
        .withColumn("prev_epoch", F.lag("epoch").over(w))
        .where(F.col("prev_committed").isNotNull() & (F.col("committed") < F.col("prev_committed")))
    )
    # an offset_reset names its group, topic and queue; "*" / -1 (a node started with
    # --accept-offset-loss, which cannot know which entries it lost) covers them all
    with_reset = steps.join(
        resets,
        ((steps.group_name == resets.r_group) | (resets.r_group == "*"))
        & ((steps.topic == resets.r_topic) | (resets.r_topic == "*"))
        & ((steps.queue_id == resets.r_queue) | (resets.r_queue == -1))
        & (resets.reset_at > steps.prev_at)
        & (resets.reset_at <= steps.taken_at),
        "left",
    )
    regressions = (
        with_reset.groupBy(*steps.columns)
        .agg(F.count("reset_at").alias("resets"))
        .where(F.col("resets") == 0)
    )
    fo = regressions.join(
        failovers,
        (failovers.fo_at > regressions.prev_at) & (failovers.fo_at <= regressions.taken_at),
        "left",
    )
    regress_rows = fo.groupBy(*regressions.columns).agg(
        F.concat_ws("; ", F.collect_list(F.concat_ws(" ", "fo_node", "fo_change"))).alias(
            "failover"
        )
    )
    regress = _violations(
        regress_rows,
        "regression",
        before=("prev_committed", "prev_node", "prev_epoch", "prev_at"),
        after=("committed", "node", "epoch", "taken_at"),
        failover=F.col("failover"),
        reconsumed=F.col("prev_committed") - F.col("committed"),
    )
    beyond = _violations(
        timeline.where(F.col("queue_max").isNotNull() & (F.col("committed") > F.col("queue_max"))),
        "beyond_queue_max",
        before=("queue_max", "node", "epoch", "taken_at"),
        after=("committed", "node", "epoch", "taken_at"),
        failover=F.lit(""),
        reconsumed=F.lit(0).cast("long"),
    )
    return timeline, regress.unionByName(beyond)


#: a new master's snapshots within this long of its first are read as one: it may apply its
#: offsets (the log's records, the pre-online copy from its peers) a moment after taking the role
LOST_GRACE_MS = 500


def lost_at_failover(seeds: list[Snapshot], snapshots: list[Snapshot], events: list[dict]):
    """``offset_violations`` rows of kind ``lost``: a (group, topic, queue) whose committed
    offset a master held and the next master (another node or epoch) holds no entry for, with
    no ``offset_reset`` between. That master answers
    no committed offset: RocketMQ's broker answers 0 for a queue that starts at 0 (the consumer
    reads it all again), the client's consumeFromWhere otherwise. The window check above
    orders only the entries snapshots hold, so it cannot see this, RocketMQ's usual loss when
    the copy every slaveSyncIntervalMs missed a commit. ``after`` is -1 (none).

    The new master's term is judged by its snapshots up to ``LOST_GRACE_MS`` after its first
    one, and its first snapshot after that. An entry gone under the same master is a cleanup
    (as RocketMQ's topic deletion), not judged. One pass over the master snapshots' entries.
    ``seeds``: the last master points of the run before (``incremental.seed_snapshots``)."""
    resets = reset_rows(events)
    failovers = [(at, f"{node} {change}") for at, node, _epoch, change in failover_rows(events)]
    last: dict[tuple[str, str, int], tuple[int, str, int, int]] = {}
    for s in sorted(seeds, key=lambda s: s.takenAt):
        for key, value in _entries(s).items():
            last[key] = (value, s.node, s.epoch, s.takenAt)
    out = []
    for (node, epoch, first_at), term in _terms(snapshots):
        entries = {id(s): _entries(s) for s in term}
        held: dict[tuple[str, str, int], tuple[int, int]] = {}
        for s in term:
            for key, value in entries[id(s)].items():
                held[key] = (value, s.takenAt)
        in_time = set()  # what the term's judged snapshots hold
        for s in _judged(term, first_at + LOST_GRACE_MS):
            in_time |= entries[id(s)].keys()
        for key, (value, node_b, epoch_b, at_b) in list(last.items()):
            if key in in_time or (node_b, epoch_b) == (node, epoch):
                continue
            del last[key]  # reported once; a later commit starts its history again
            if any(_covers(r, key, at_b, first_at) for r in resets):
                continue
            out.append(
                {
                    "kind": "lost",
                    "evidence": "snapshots",
                    "group_name": key[0],
                    "topic": key[1],
                    "queue_id": key[2],
                    "before": value,
                    "node_before": node_b,
                    "epoch_before": epoch_b,
                    "at_before": at_b,
                    "log_offset_before": None,
                    "after": -1,
                    "node_after": node,
                    "epoch_after": epoch,
                    "at_after": first_at,
                    "log_offset_after": None,
                    "failover": "; ".join(f for t, f in failovers if at_b < t <= first_at),
                    "reconsumed_messages": value,  # from the queue's start, at most
                }
            )
        for key, (value, at) in held.items():
            last[key] = (value, node, epoch, at)
    return out


def _judged(term: list[Snapshot], grace_end_ms: int) -> list[Snapshot]:
    """A term's snapshots up to ``grace_end_ms`` and the first one after it."""
    judged = [s for s in term if s.takenAt <= grace_end_ms]
    later = [s for s in term if s.takenAt > grace_end_ms]
    return judged + later[:1]


def _terms(snapshots: list[Snapshot]):
    """The master snapshots in time order, cut into runs of one (node, epoch):
    ((node, epoch, first takenAt), [snapshots])."""
    masters = sorted((s for s in snapshots if s.role != "SLAVE"), key=lambda s: (s.takenAt, s.node))
    run: list[Snapshot] = []
    for s in masters:
        if run and (s.node, s.epoch) != (run[0].node, run[0].epoch):
            yield (run[0].node, run[0].epoch, run[0].takenAt), run
            run = []
        run.append(s)
    if run:
        yield (run[0].node, run[0].epoch, run[0].takenAt), run


def _entries(s: Snapshot) -> dict[tuple[str, str, int], int]:
    out = {}
    for key, queues in s.consumerOffsets.items():
        topic, _, group = key.partition("@")
        for q, off in queues.items():
            out[(group, topic, int(q))] = int(off)
    return out


def _covers(reset: tuple[int, str, str, int], key: tuple[str, str, int], after: int, upto: int):
    at, group, topic, queue = reset
    return (
        after < at <= upto
        and group in ("*", key[0])
        and topic in ("*", key[1])
        and queue in (-1, key[2])
    )


def _violations(df, kind: str, before: tuple, after: tuple, failover, reconsumed):
    """The ``offset_violations`` columns from (value, node, epoch, time) before and after."""
    from pyspark.sql import functions as F

    names = ("", "node_", "epoch_", "at_")
    evidence = F.lit("snapshots").alias("evidence")
    cols = [F.lit(kind).alias("kind"), evidence, "group_name", "topic", "queue_id"]
    for side, fields in (("before", before), ("after", after)):
        cols += [F.col(f).alias(f"{n}{side}") for n, f in zip(names, fields, strict=True)]
        cols.append(F.lit(None).cast("double").alias(f"log_offset_{side}"))  # (records only)
    cols += [failover.alias("failover"), reconsumed.alias("reconsumed_messages")]
    return df.select(*cols)
