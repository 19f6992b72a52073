"""The commit history judged from bytes alone (no Spark): Hypothesis over where commits, resets
and ordinary messages (some whose body names the offsets topic) fall in a chunk; the audit finds
exactly the rewinds no reset excuses, each with its records' physical offsets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.offset_commits.model import OFFSETS_TOPIC
from contracts.record.builder import encode_message
from contracts.record.model import Message
from spark_jobs.commit_history import judge_commits
from spark_jobs.log_integrity import chunk_rows
from tests.spark_jobs.commit_archives import commit

ops = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.integers(0, 2), st.integers(0, 50)),
        st.tuples(st.just("reset"), st.integers(0, 2), st.integers(0, 50)),
        st.tuples(st.just("noise"), st.integers(0, 2), st.integers(0, 50)),
    ),
    max_size=40,
)


def _bytes(plan: list[tuple]) -> tuple[bytes, list[int]]:
    data, starts, next_qo = bytearray(), [], {}
    for i, (op, q, v) in enumerate(plan):
        if op == "noise":  # an ordinary message whose body holds the topic's name
            msg = Message("orders", f"about {OFFSETS_TOPIC} {i}".encode(), queue_id=q)
        elif op == "reset":
            msg = commit("g", {q: v}, at=i, previous={q: 99}, by="admin")
        else:
            msg = commit("g", {q: v}, at=i)
        starts.append(len(data))
        qo = next_qo.get((msg.topic, msg.queue_id), 0)
        next_qo[(msg.topic, msg.queue_id)] = qo + 1
        data += encode_message(msg, ("127.0.0.1", 10911)).stamp(qo, len(data), 1_000 + i)
    return bytes(data), starts


def _expected(plan: list[tuple], starts: list[int]) -> list[tuple]:
    last: dict[int, tuple[int, int]] = {}
    out = []
    for (op, q, v), off in zip(plan, starts, strict=True):
        if op == "noise":
            continue
        if op == "commit" and q in last and v < last[q][0]:
            out.append((q, last[q][0], v, last[q][1], off))
        last[q] = (v, off)
    return out


def _rows(data: bytes) -> list[dict]:
    from spark_jobs.log_integrity import SCAN_COLUMNS

    rows = [dict(zip(SCAN_COLUMNS, r, strict=True)) for r in chunk_rows("n", "k", 0, data, 1 << 30)]
    assert not [r for r in rows if r["kind"] == "issue"], rows
    return [r for r in rows if r["kind"] == "commit"]


@settings(max_examples=60, deadline=None)
@given(ops)
def test_every_unexcused_rewind_is_found_exactly(plan) -> None:
    data, starts = _bytes(plan)
    history = judge_commits(_rows(data), {"k": "SYNC_MASTER"}, [])
    got = [
        (v["queue_id"], v["before"], v["after"], v["log_offset_before"], v["log_offset_after"])
        for v in history.violations
    ]
    assert sorted(got) == sorted(_expected(plan, starts))
    assert history.records == sum(op != "noise" for op, _q, _v in plan)


def test_a_slave_copy_is_the_same_record_and_epochs_order_the_log() -> None:
    first, _ = _bytes([("commit", 0, 7)])
    rows = _rows(first)
    copy = [dict(r, node="s", key="ks") for r in rows]
    later = [
        dict(
            r,
            offset=0,
            detail=r["detail"].replace('"epoch":0', '"epoch":1').replace('"0":7', '"0":5'),
        )
        for r in rows
    ]
    history = judge_commits(rows + copy + later, {"k": "SYNC_MASTER", "ks": "SLAVE"}, [])
    assert history.records == 2
    (v,) = history.violations
    assert (v["node_before"], v["epoch_before"], v["epoch_after"]) == ("n", 0, 1)


def test_the_compiled_topic_walk_and_the_python_one_agree() -> None:
    import numpy as np

    from spark_jobs import _offset_scan

    data = bytearray()
    for i, host in enumerate(["127.0.0.1", "::1", "127.0.0.1", "::1"]):
        msg = commit("g", {0: i}, at=i) if i % 2 else Message("orders", b"x" * 30)
        msg.born_host = (host, 1)
        data += encode_message(msg, (host, 10911)).stamp(i // 2, len(data), 5)
    out = np.zeros(8, np.int64)
    topic = OFFSETS_TOPIC.encode()
    n = _offset_scan._starts_of_topic(list(data), list(topic), out)
    assert n == 2
    assert _offset_scan.starts_of_topic(bytes(data), topic, 8) == out[:n].tolist()


def _witnesses(history) -> list[tuple]:
    return sorted(
        (v["queue_id"], v["before"], v["after"], v["log_offset_before"], v["log_offset_after"])
        for v in history.violations
    )


@settings(max_examples=60, deadline=None)
@given(ops, st.data())
def test_two_incremental_runs_judge_as_one(plan, data) -> None:
    """A run over the records up to ``split``, then one over the rest and some already judged
    (the chunk read again for continuity), seeded with the first run's last points through the
    audit state document: the same regressions as one run over everything, none twice."""
    from spark_jobs.incremental import AuditState, commit_points, commit_seed

    rows = _rows(_bytes(plan)[0])
    split = data.draw(st.integers(0, len(rows)), label="split")
    again = data.draw(st.integers(0, split), label="read again from")
    roles = {"k": "SYNC_MASTER"}
    whole = judge_commits(rows, roles, [])
    first = judge_commits(rows[:split], roles, [])
    state = AuditState(commits=commit_points(first.last))
    second = judge_commits(rows[again:], roles, [], commit_seed(state))
    assert sorted(_witnesses(first) + _witnesses(second)) == _witnesses(whole)
    assert first.records + second.records == whole.records
    assert commit_points(second.last) == commit_points(whole.last)
