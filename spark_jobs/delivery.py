"""Check ``delivery`` (informational unless a threshold is set): what a run of the broker did to
its consumers, from the archive alone, as OpenChaos shows a run: ``enqueued`` messages stored,
``duplicated`` copies stored by producer retries (one ``UNIQ_KEY`` stored more than once in a
topic), ``redelivered`` messages a consumer group was sent again after its offset moved back
(``redelivery``, from the commit records), ``lost`` acknowledged ranges (check 2's findings).

read: the commit log chunks masters shipped (a record replicated to a slave is the same record;
``role`` != SLAVE), walked on the executors by the compiled record walk (no bodies) in the
chunk tasks of log integrity and replica consistency, on the bytes they read anyway; each
master chunk's messages come back with the task's scan rows as arrays, one object per chunk
(:func:`duplicates_kept`); on Spark Connect, without RDDs, a job of its own reads them again
(:func:`duplicates_spark`, grouped in Spark). transform: one copy per (epoch, log offset),
grouped by (topic, UNIQ_KEY) in NumPy, hash first, full keys for the candidates. System topics
are left out (offset commits, and the schedule topic, whose messages are stored again in their
real topic with the same key), and so are the retry and dead-letter topics (the broker's own
copies).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from contracts import audit_tables as T
from contracts.errors import ArchiveError, CorruptRecordError
from contracts.object_store import StoreSpec
from contracts.offset_commits.model import OFFSETS_TOPIC
from contracts.record.properties import PROPERTY_UNIQ_KEY
from contracts.record.reader import scan_records

MESSAGE_COLUMNS = ("epoch", "topic", "uniq", "log_offset", "at", "msg_id")
#: the first field of a message row a chunk task keeps in Spark: ``(MESSAGE_KIND, *columns)``
MESSAGE_KIND = "message"
MESSAGE_SCHEMA = "epoch long, topic string, uniq string, log_offset long, at long, msg_id string"
SKIPPED_TOPICS = frozenset({OFFSETS_TOPIC, "SCHEDULE_TOPIC_XXXX"})
EXAMPLES_MAX = 20  # duplicated keys shown, most copies first
MSG_IDS_SHOWN = 3


#: a consumer's retry and dead-letter topics hold copies the broker made (send-back), not
#: messages a producer stored: they keep the original UNIQ_KEY
SKIPPED_PREFIXES = ("rmq_sys_", "%retry%", "%dlq%")


#: ``HAPROOF_AUDIT_DELIVERY=0`` switches the duplicate accounting off (the chunk tasks keep no
#: message arrays; ``delivery`` then counts nothing): to measure what it costs (docs/benchmarks.md)
DELIVERY_ENV = "HAPROOF_AUDIT_DELIVERY"


def delivery_on() -> bool:
    return os.environ.get(DELIVERY_ENV, "1") != "0"


def counted(topic: str) -> bool:
    return topic not in SKIPPED_TOPICS and not topic.lower().startswith(SKIPPED_PREFIXES)


def message_rows(data: bytes, start: int, epoch: int, source: str) -> Iterator[tuple]:
    """``MESSAGE_COLUMNS`` of each stored message of a chunk its master shipped in ``epoch``
    (stops at a record log integrity reports as corrupt)."""
    try:
        for rec in scan_records(data, base_offset=start, source=source, with_body=False):
            if not rec.is_blank and counted(rec.topic):
                uniq = rec.properties.get(PROPERTY_UNIQ_KEY)
                at, off = rec.store_timestamp, rec.physical_offset
                yield epoch, rec.topic, uniq, off, at, rec.msg_id
    except CorruptRecordError:
        return


def duplicates_of(rows) -> dict:
    """The duplicates part of the doc from message rows, in Python (what the Spark job
    computes at scale; tests compare the two). One record per (epoch, log offset): chunks of
    one master overlap only when shipped twice."""
    enqueued: dict[str, int] = {}
    copies: dict[tuple[str, str], dict[tuple[int, int], tuple]] = {}
    seen: set[tuple[int, int]] = set()
    for epoch, topic, uniq, off, at, msg_id in rows:
        if (epoch, off) in seen:
            continue
        seen.add((epoch, off))
        enqueued[topic] = enqueued.get(topic, 0) + 1
        if uniq is not None:
            copies.setdefault((topic, uniq), {})[(epoch, off)] = (at, msg_id)
    keys = []
    for (topic, uniq), by_off in copies.items():
        if len(by_off) > 1:
            ats = [a for a, _m in by_off.values()]
            ids = [m for _o, (_a, m) in sorted(by_off.items())]
            keys.append((topic, uniq, len(by_off), max(ats) - min(ats), ids[:MSG_IDS_SHOWN]))
    return summarize(enqueued, keys)


def summarize(enqueued: dict[str, int], keys: list[tuple]) -> dict:
    """``keys``: (topic, uniq, copies, gapMs, msgIds) of every duplicated key."""
    zero = {"enqueued": 0, "duplicated": 0, "keys": 0, "maxGapMs": 0}
    topics = {t: dict(zero, enqueued=n) for t, n in sorted(enqueued.items())}
    for topic, _uniq, n, gap, _ids in keys:
        t = topics.setdefault(topic, dict(zero))
        t["duplicated"] += n - 1
        t["keys"] += 1
        t["maxGapMs"] = max(t["maxGapMs"], gap)
    shown = sorted(keys, key=lambda k: (-k[2], k[0], k[1]))[:EXAMPLES_MAX]
    return {
        "enqueued": sum(enqueued.values()),
        "duplicated": sum(t["duplicated"] for t in topics.values()),
        "topics": topics,
        "examples": [
            {"topic": t, "uniqKey": u, "copies": n, "gapMs": g, "msgIds": list(ids)}
            for t, u, n, g, ids in shown
        ],
    }


def _read(spec: StoreSpec):
    def run(batches):
        import pandas as pd

        from spark_jobs.archive_reader import executor_store

        store = executor_store(spec)
        for pdf in batches:
            rows: list[tuple] = []
            for key, start, end, epoch in pdf.itertuples(index=False, name=None):
                try:
                    data = store.get(key)
                except ArchiveError:
                    continue  # archive integrity reports the object
                if len(data) == end - start:
                    rows += message_rows(data, int(start), int(epoch), key)
            yield pd.DataFrame(rows, columns=list(MESSAGE_COLUMNS))

    return run


def duplicates_spark(spark, spec: StoreSpec, chunks: list[dict]) -> dict:
    """:func:`duplicates_of` over the messages of ``chunks``, computed in Spark."""
    from pyspark.sql import functions as F

    from spark_jobs.session import rows_frame, task_partitions

    if not chunks:
        return summarize({}, [])
    rows = [(c["key"], c["start"], c["end"], c["epoch"]) for c in chunks]
    n = task_partitions(spark, len(rows))
    frame = rows_frame(spark, rows, "key string, start long, end long, epoch long", n)
    msgs = frame.mapInPandas(_read(spec), MESSAGE_SCHEMA).dropDuplicates(["epoch", "log_offset"])
    enqueued = {r["topic"]: r["count"] for r in msgs.groupBy("topic").count().collect()}
    dup = (
        msgs.where(F.col("uniq").isNotNull())
        .groupBy("topic", "uniq")
        .agg(
            F.count("*").alias("copies"),
            (F.max("at") - F.min("at")).alias("gap"),
            F.sort_array(F.collect_list(F.struct("epoch", "log_offset", "msg_id"))).alias("ids"),
        )
        .where(F.col("copies") > 1)
    )
    keys = [
        (
            r["topic"],
            r["uniq"],
            r["copies"],
            r["gap"],
            [x["msg_id"] for x in r["ids"]][:MSG_IDS_SHOWN],
        )
        for r in dup.collect()
    ]
    return summarize(enqueued, keys)


def chunk_messages(data: bytes, start: int, epoch: int, source: str, sound: bool):
    """The kept row of a master chunk's counted messages: ``(MESSAGE_KIND, Messages)`` from
    the record walk's arrays when the chunk is ``sound`` (its check found no issue), else from
    the records decoded in Python (up to the first corrupt one); None when it holds none."""
    from spark_jobs.delivery_arrays import from_chunk, from_rows

    got = from_chunk(data, start, epoch, counted) if sound else None
    if got is None:
        got = from_rows(message_rows(data, start, epoch, source))
    return (MESSAGE_KIND, got) if len(got) else None


def duplicates_kept(kept: list) -> dict:
    """:func:`duplicates_of` over the message arrays the chunk tasks of log integrity and
    replica consistency returned with their scan rows (``delivery_arrays.Messages``, one per
    master chunk, in the same collect: no chunk is read again, nothing is persisted in Spark
    or shuffled), grouped on the driver in NumPy: the totals and the hashes held more than
    once, then only the messages with those hashes compared by their full keys, so the
    counts are exact. The driver holds every counted message's columns and UNIQ_KEY bytes
    (about 100 bytes a message) while it groups them."""
    from spark_jobs.delivery_arrays import candidates, concat, counts, summaries

    if not kept:
        return summarize({}, [])
    every = concat(kept)
    enqueued, hashes = counts(every)
    out = [("enqueued", enqueued)]
    if len(hashes):
        found = candidates(every, hashes)
        out += [x for x in summaries(found, MSG_IDS_SHOWN) if x[0] == "dup"]
    return merged_summary(out)


def merged_summary(out) -> dict:
    """The doc's duplicates part from the buckets' ``("dup", ...)`` / ``("enqueued", ...)``."""
    enqueued: dict[str, int] = {}
    for kind, v in out:
        if kind == "enqueued":
            for topic, n in v.items():
                enqueued[topic] = enqueued.get(topic, 0) + n
    return summarize(enqueued, [v for kind, v in out if kind == "dup"])


def duplicates(spark, spec: StoreSpec, kept: list, masters: list[dict]) -> dict:
    """The duplicates part of the doc: from the arrays the chunk tasks ``kept`` (a
    SparkContext), else (Spark Connect) by a job reading the ``masters``' chunks again;
    nothing counted when switched off (``DELIVERY_ENV``)."""
    from spark_jobs.session import has_context

    if not delivery_on():
        return summarize({}, [])
    if has_context(spark):
        return duplicates_kept(kept)
    return duplicates_spark(spark, spec, masters)


def delivery_doc(dups: dict, redelivered: dict, lost: int) -> dict:
    """verdict.json ``delivery``: the totals, per topic, per consumer group and queue."""
    groups: dict[str, dict] = {}
    for (group, topic, q), r in redelivered.items():
        g = groups.setdefault(group, {"redelivered": 0, "rewinds": 0, "queues": {}})
        g["redelivered"] += r["redelivered"]
        g["rewinds"] += r["rewinds"]
        if r["redelivered"] or r["rewinds"]:
            g["queues"][f"{topic}/{q}"] = r
    return {
        "enqueued": dups["enqueued"],
        "duplicated": dups["duplicated"],
        "redelivered": sum(g["redelivered"] for g in groups.values()),
        "lost": lost,
        "topics": dups["topics"],
        "duplicateExamples": dups["examples"],
        "groups": groups,
    }


def delivery_check(doc: dict, max_duplicated: int | None, max_redelivered: int | None):
    """The ``delivery`` check of ``doc`` (see ``contracts.audit_tables.delivery_status``)."""
    status = T.delivery_status(
        doc["duplicated"], doc["redelivered"], doc["enqueued"], max_duplicated, max_redelivered
    )
    said = (
        f"{doc['enqueued']} enqueued, {doc['duplicated']} duplicated, "
        f"{doc['redelivered']} redelivered, {doc['lost']} lost range(s)"
    )
    findings = 1 if status == T.STATUS_FAIL else 0
    return T.CheckResult(T.DELIVERY, status, findings, doc["enqueued"], said)
