"""Check 3, log integrity, per node: records chain, magic codes, body CRCs, BLANK only at file
ends, records inside one file, and queue offsets contiguous per (topic, queueId).

read: one Spark task per archived chunk (executors fetch the chunk's bytes);
transform: per-chunk issues + per-queue summaries, then a window over chunks for queue offset
continuity across chunk boundaries; write: the ``records_issues`` rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from broker.archive.object_store import StoreSpec
from broker.errors import CorruptRecordError
from broker.store import message as msgfmt

ISSUE_SCHEMA = (
    "kind string, node string, offset long, check string, detail string, topic string, "
    "queue_id int, first_qo long, last_qo long, chunk_start long, records long"
)
CHUNK_COLUMNS = ["node", "key", "start", "end", "mappedFileSize", "epoch"]


def check_chunk(data: bytes, start: int, file_size: int, node: str) -> tuple[list, dict, int]:
    """Walk one chunk's records; returns (issues, {(topic, qid): [first, last]}, records)."""
    issues: list[tuple] = []
    queues: dict[tuple[str, int], list[int]] = {}
    pos = 0
    n = 0
    size = len(data)
    while pos < size:
        off = start + pos
        try:
            rec = msgfmt.decode_record(data, pos, base_offset=start, source=node)
        except CorruptRecordError as exc:
            issues.append((off, "record_malformed", exc.reason, None, None))
            return issues, queues, n
        n += 1
        if rec.is_blank:
            if rec.end % file_size:
                issues.append(
                    (off, "blank_not_at_file_end", f"BLANK ends at {rec.end}", None, None)
                )
        else:
            if rec.stored_physical_offset != off:
                issues.append(
                    (
                        off,
                        "physical_offset_mismatch",
                        f"record says {rec.stored_physical_offset}",
                        rec.topic,
                        rec.queue_id,
                    )
                )
            if off // file_size != (rec.end - 1) // file_size:
                issues.append((off, "crosses_file_end", f"ends at {rec.end}", rec.topic, None))
            if not rec.crc_ok:
                issues.append(
                    (
                        off,
                        "crc_mismatch",
                        f"bodyCRC {rec.body_crc} != {msgfmt.body_crc(rec.body)} "
                        f"(queueOffset {rec.queue_offset}, msgId {rec.msg_id})",
                        rec.topic,
                        rec.queue_id,
                    )
                )
            key = (rec.topic, rec.queue_id)
            q = queues.get(key)
            if q is None:
                queues[key] = [rec.queue_offset, rec.queue_offset]
            else:
                if rec.queue_offset != q[1] + 1:
                    issues.append(
                        (
                            off,
                            "queue_offset_gap",
                            f"expected queue offset {q[1] + 1}, found {rec.queue_offset}",
                            rec.topic,
                            rec.queue_id,
                        )
                    )
                q[1] = rec.queue_offset
        pos += rec.total_size
    return issues, queues, n


def _check_partition(spec: StoreSpec):
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        store = spec.open()
        for pdf in batches:
            rows = []
            for c in pdf.itertuples(index=False):
                data = store.get_range(c.key, 0, c.end - c.start)
                issues, queues, n = check_chunk(data, c.start, c.mappedFileSize, c.node)
                for off, check, detail, topic, qid in issues:
                    rows.append(
                        ("issue", c.node, off, check, detail, topic, qid, None, None, c.start, None)
                    )
                for (topic, qid), (first, last) in queues.items():
                    rows.append(
                        ("queue", c.node, None, None, None, topic, qid, first, last, c.start, None)
                    )
                rows.append(("count", c.node, None, None, None, None, None, None, None, c.start, n))
            yield pd.DataFrame(
                rows,
                columns=[
                    "kind", "node", "offset", "check", "detail", "topic", "queue_id",
                    "first_qo", "last_qo", "chunk_start", "records",
                ],
            )  # fmt: skip

    return run


def run_log_integrity(spark, spec: StoreSpec, chunks: list[dict]):
    """Returns (issues DataFrame, records checked)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not chunks:
        empty = spark.createDataFrame([], "node string, offset long, check string, detail string")
        return empty, 0
    rows = [tuple(c[k] for k in CHUNK_COLUMNS) for c in chunks]
    df = spark.createDataFrame(
        rows,
        "node string, key string, start long, end long, mappedFileSize long, epoch long",
    )
    n_parts = max(1, min(len(rows), spark.sparkContext.defaultParallelism * 4))
    out = df.repartition(n_parts).mapInPandas(_check_partition(spec), ISSUE_SCHEMA).cache()
    records = out.where("kind = 'count'").agg(F.sum("records")).collect()[0][0] or 0
    issues = out.where("kind = 'issue'").select("node", "offset", "check", "detail")
    # queue offsets continue across chunk boundaries
    w = Window.partitionBy("node", "topic", "queue_id").orderBy("chunk_start")
    gaps = (
        out.where("kind = 'queue'")
        .withColumn("prev_last", F.lag("last_qo").over(w))
        .where(F.col("prev_last").isNotNull() & (F.col("first_qo") != F.col("prev_last") + 1))
        .select(
            "node",
            F.col("chunk_start").alias("offset"),
            F.lit("queue_offset_gap").alias("check"),
            F.concat(
                F.lit("topic "), F.col("topic"), F.lit(" queue "), F.col("queue_id").cast("string"),
                F.lit(": expected queue offset "), (F.col("prev_last") + 1).cast("string"),
                F.lit(", found "), F.col("first_qo").cast("string"),
            ).alias("detail"),
        )
    )  # fmt: skip
    return issues.unionByName(gaps), int(records)
