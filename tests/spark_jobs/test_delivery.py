"""Duplicates stored by producer retries, counted exactly: Hypothesis over which keys are sent
again, into which topic, and where offset commits and scheduled copies fall in the chunk."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import audit_tables as T
from contracts.record.builder import encode_message
from contracts.record.model import Message
from spark_jobs.delivery import delivery_check, delivery_doc, duplicates_of, message_rows
from tests.spark_jobs.commit_archives import commit

sends = st.lists(
    st.tuples(
        st.sampled_from(["A", "B", "SCHEDULE_TOPIC_XXXX", "%RETRY%g", "commit"]), st.integers(0, 6)
    ),
    max_size=40,
)


def _chunk(plan: list[tuple]) -> bytes:
    data, next_qo = bytearray(), Counter()
    for i, (topic, k) in enumerate(plan):
        if topic == "commit":
            msg = commit("g", {0: k}, at=i)
        else:
            msg = Message(topic, b"x" * 20, properties={"UNIQ_KEY": f"K{k}"})
        qo = next_qo[(msg.topic, msg.queue_id)]
        next_qo[(msg.topic, msg.queue_id)] += 1
        data += encode_message(msg, ("127.0.0.1", 10911)).stamp(qo, len(data), 1_000 * i)
    return bytes(data)


@settings(max_examples=100, deadline=None)
@given(sends)
def test_duplicates_are_counted_exactly(plan) -> None:
    rows = list(message_rows(_chunk(plan), 0, 0, "k"))
    rows += list(message_rows(_chunk(plan), 0, 0, "k-again"))  # a chunk shipped twice
    got = duplicates_of(rows)
    stored = [(t, k, i) for i, (t, k) in enumerate(plan) if t in ("A", "B")]
    copies = Counter((t, k) for t, k, _i in stored)
    assert got["enqueued"] == len(stored)
    assert got["duplicated"] == sum(n - 1 for n in copies.values())
    for topic in ("A", "B"):
        mine = {k: [i for t, kk, i in stored if (t, kk) == (topic, k)] for t, k in copies}
        gaps = [1_000 * (max(v) - min(v)) for v in mine.values() if len(v) > 1]
        if topic in got["topics"]:
            assert got["topics"][topic]["maxGapMs"] == max(gaps, default=0)
    for ex in got["examples"]:
        assert ex["copies"] == copies[(ex["topic"], int(ex["uniqKey"][1:]))]


def test_the_check_counts_and_fails_only_past_a_threshold() -> None:
    dups = duplicates_of(message_rows(_chunk([("A", 1), ("A", 1), ("B", 2)]), 0, 0, "k"))
    doc = delivery_doc(dups, {("g", "A", 0): {"redelivered": 4, "rewinds": 1}}, lost=0)
    assert (doc["enqueued"], doc["duplicated"], doc["redelivered"]) == (3, 1, 4)
    assert doc["groups"]["g"]["queues"] == {"A/0": {"redelivered": 4, "rewinds": 1}}
    assert delivery_check(doc, None, None).status == T.STATUS_PASS
    assert delivery_check(doc, 1, 4).status == T.STATUS_PASS
    assert delivery_check(doc, 0, None).status == T.STATUS_FAIL
    assert delivery_check(doc, None, 3).status == T.STATUS_FAIL
    empty = delivery_doc(duplicates_of([]), {}, lost=0)
    assert delivery_check(empty, None, None).status == T.STATUS_PASS  # informational
    assert delivery_check(empty, 0, None).status == T.STATUS_NO_EVIDENCE


def _kept_summary(kept: list) -> dict:
    """What the audit computes from the arrays the chunk tasks return (the driver's part)."""
    from spark_jobs.delivery import duplicates_kept

    return duplicates_kept(kept)


def _kept(data: bytes, key: str, sound: bool, start: int = 0):
    from spark_jobs.delivery import chunk_messages

    got = chunk_messages(data, start, 0, key, sound)
    return [] if got is None else [got[1]]


@settings(max_examples=100, deadline=None)
@given(sends)
def test_the_shared_pass_counts_as_the_reference_does(plan) -> None:
    """The message arrays the chunk tasks keep (from the compiled walk, or decoded when a chunk
    has issues) give the document :func:`duplicates_of` gives (a chunk shipped twice too)."""
    rows = list(message_rows(_chunk(plan), 0, 0, "k"))
    rows += list(message_rows(_chunk(plan), 0, 0, "k-again"))
    kept = _kept(_chunk(plan), "k", True) + _kept(_chunk(plan), "k-again", False)
    assert _kept_summary(kept) == duplicates_of(rows)


@settings(max_examples=50, deadline=None)
@given(sends)
def test_hash_collisions_never_merge_keys(plan) -> None:
    """Every key given one hash (the worst collision): the counts stay exact, as every
    candidate group is compared by its full topic and UNIQ_KEY."""
    rows = list(message_rows(_chunk(plan), 0, 0, "k"))
    kept = _kept(_chunk(plan), "k", True)
    for m in kept:
        m.cols[5] = 7
    assert _kept_summary(kept) == duplicates_of(rows)


def test_duplicates_from_the_arrays_two_scan_jobs_return(spark) -> None:
    """The arrays come back with the scan rows of two jobs (the comparison job's and log
    integrity's: one collect each, nothing persisted) and are counted as one set."""
    from spark_jobs.delivery import MESSAGE_KIND, duplicates_kept
    from spark_jobs.session import run_tasks_keeping

    plan = [("A", 1), ("B", 2), ("A", 1), ("commit", 3), ("A", 3), ("B", 2), ("A", 1)]
    rows = list(message_rows(_chunk(plan), 0, 0, "k"))
    head = _chunk(plan[:3])  # the first chunk; the rest of the log is the second
    parts = [
        ("k", _kept(head, "k", True)),
        ("k2", _kept(_chunk(plan)[len(head) :], "k2", False, start=len(head))),
    ]

    def task(items, kind=MESSAGE_KIND):  # the arrays as a chunk task returns them
        for key, arrays in items:
            yield ("count", key)
            yield from ((kind, m) for m in arrays)

    kept = []
    for part in parts:
        out, values = run_tasks_keeping(spark, [part], 1, task, MESSAGE_KIND, ["kind", "key"])
        assert out == [{"kind": "count", "key": part[0]}]
        kept += values
    assert not spark.sparkContext._jsc.getPersistentRDDs()  # nothing left cached
    got = duplicates_kept(kept)
    assert got == duplicates_of(rows)
    assert (got["enqueued"], got["duplicated"]) == (6, 3)
