"""Check 4, offset monotonicity: per (group, topic, queue), the committed offset of the node that
was master at each snapshot never goes backwards, except by a recorded ``offset_reset``; no
committed offset exceeds its queue's max offset.

read: snapshots and events (small JSON, listed by the driver) as DataFrames;
transform: a window per (group, topic, queue) ordered by snapshot time, joined with resets and
failovers between consecutive master snapshots; write: ``offset_timeline`` and
``offset_violations``.
"""

from __future__ import annotations

from broker.archive.layout import Snapshot

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
                    (s.takenAt, s.node, s.role, s.epoch, group, topic, int(q), int(off),
                     None if qmax is None else int(qmax))
                )  # fmt: skip
    return rows


def run_offset_monotonicity(spark, snapshots: list[Snapshot], events: list[dict]):
    """Returns (timeline DataFrame, violations DataFrame)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    timeline = spark.createDataFrame(timeline_rows(snapshots), TIMELINE_SCHEMA)
    resets = spark.createDataFrame(
        [
            (e["at"], e["group"], e["topic"], int(e["queue"]))
            for e in events
            if e["kind"] == "offset_reset"
        ],
        "reset_at long, r_group string, r_topic string, r_queue int",
    )
    failovers = spark.createDataFrame(
        [
            (e["at"], e["node"], int(e["epoch"]), f"{e.get('from')}->{e.get('to')}")
            for e in events
            if e["kind"] == "role_changed"
        ],
        "fo_at long, fo_node string, fo_epoch long, fo_change string",
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
    with_reset = steps.join(
        resets,
        (steps.group_name == resets.r_group)
        & (steps.topic == resets.r_topic)
        & (steps.queue_id == resets.r_queue)
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
    regress = regress_rows.select(
        F.lit("regression").alias("kind"),
        "group_name", "topic", "queue_id",
        F.col("prev_committed").alias("before"),
        F.col("committed").alias("after"),
        F.col("prev_node").alias("node_before"),
        F.col("node").alias("node_after"),
        F.col("prev_epoch").alias("epoch_before"),
        F.col("epoch").alias("epoch_after"),
        F.col("prev_at").alias("at_before"),
        F.col("taken_at").alias("at_after"),
        "failover",
        (F.col("prev_committed") - F.col("committed")).alias("reconsumed_messages"),
    )  # fmt: skip
    beyond = timeline.where(
        F.col("queue_max").isNotNull() & (F.col("committed") > F.col("queue_max"))
    ).select(
        F.lit("beyond_queue_max").alias("kind"),
        "group_name", "topic", "queue_id",
        F.col("queue_max").alias("before"),
        F.col("committed").alias("after"),
        F.col("node").alias("node_before"),
        F.col("node").alias("node_after"),
        F.col("epoch").alias("epoch_before"),
        F.col("epoch").alias("epoch_after"),
        F.col("taken_at").alias("at_before"),
        F.col("taken_at").alias("at_after"),
        F.lit("").alias("failover"),
        F.lit(0).cast("long").alias("reconsumed_messages"),
    )  # fmt: skip
    return timeline, regress.unionByName(beyond)
