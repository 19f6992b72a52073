"""Check 4 over commit records (DESIGN.md section 3b): every consumer offset commit a haproof
node appended to ``RMQ_SYS_CONSUMER_OFFSETS`` is judged, not only the ones a snapshot caught.

read: the chunk tasks that check log integrity also pick the offset records out of the bytes
they read (:func:`commit_rows`: only in a chunk whose walk saw the offsets queue, a compiled
walk of the frame chain finds them, and only they are decoded; no extra object is read); transform (driver):
:func:`judge_commits` orders each (group, topic, queue)'s commits in the log order of the master
of each epoch (body epoch, then physical offset; a slave's copy of a record is the same record)
and reports every commit lower than the one before it with no ``reset`` record between them;
write: rows of ``offset_violations`` with ``evidence`` = ``records``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.errors import CorruptRecordError, OffsetRecordError
from contracts.offset_commits.model import OFFSETS_QUEUE_ID, OFFSETS_TOPIC, OffsetCommit
from contracts.offset_commits.reader import is_offset_record, parse_body, parse_record
from contracts.record.reader import decode_record
from spark_jobs._offset_scan import starts_of_topic

EVIDENCE_RECORDS = "records"
EVIDENCE_SNAPSHOTS = "snapshots"
_TOPIC = OFFSETS_TOPIC.encode()


def offset_records(data: bytes, start: int, source: str, count: int):
    """``(physical offset, store timestamp, OffsetCommit | OffsetRecordError, body)`` for the
    ``count`` records of the offsets topic in a chunk (the walk's queue range says how many)."""
    for pos in starts_of_topic(data, _TOPIC, count):
        try:
            rec = decode_record(data, pos, base_offset=start, source=source)
        except CorruptRecordError:
            continue  # log integrity reports the record
        if not is_offset_record(rec):
            continue
        try:
            got: OffsetCommit | OffsetRecordError = parse_record(rec)
        except OffsetRecordError as exc:
            got = exc
        yield rec.physical_offset, rec.store_timestamp, got, rec.body


def commit_rows(
    node: str, key: str, start: int, data: bytes, queues: dict, scan_row
) -> list[tuple]:
    """The ``SCAN_FIELDS`` rows of a chunk's offset records: ``commit`` rows (the body as
    stored JSON in ``detail``, the store time in ``at``), and an ``issue`` for a record of
    the offsets topic that breaks section 3b. ``queues``: the record walk's first/last queue
    offset per (topic, queueId); a chunk without the offsets queue costs nothing more."""
    span = queues.get((OFFSETS_TOPIC, OFFSETS_QUEUE_ID))
    if span is None:
        return []
    rows = []
    for off, at, got, body in offset_records(data, start, key, span[1] - span[0] + 1):
        where = {"start": start, "node": node, "key": key, "offset": off}
        if isinstance(got, OffsetRecordError):
            bad = {"topic": OFFSETS_TOPIC, "queue_id": 0, "found": got.field}
            rows.append(
                scan_row(kind="issue", check="offset_record", detail=str(got), **where, **bad)
            )
        else:
            # the body as stored (strict UTF-8 JSON: it parsed), parsed again on the driver
            rows.append(scan_row(kind="commit", at=at, detail=bytes(body).decode(), **where))
    return rows


@dataclass(frozen=True, slots=True)
class CommitPoint:
    """One queue's value in one record."""

    epoch: int
    log_offset: int
    node: str
    at_ms: int
    value: int
    reset: bool


@dataclass
class CommitHistory:
    """What the records said: the violations, and per consumer group its records and time."""

    violations: list[dict] = field(default_factory=list)
    records: int = 0
    # group -> commits, fromMs, toMs, queues (the (topic, queue) pairs its records named)
    groups: dict[str, dict] = field(default_factory=dict)
    #: (group, topic, queue) -> its newest point: what the next incremental run compares with
    last: dict[tuple[str, str, int], CommitPoint] = field(default_factory=dict)


def ordered_records(commits: list[dict], roles: dict[str, str]) -> list[tuple]:
    """One copy of each record, in log order: (epoch, offset, node, at, OffsetCommit). The
    copy a master shipped wins over a slave's (the same bytes when replication worked)."""
    best: dict[tuple[int, int], tuple] = {}
    for r in commits:
        c = parse_body(r["detail"].encode())
        k = (c.epoch, int(r["offset"]))
        slave = roles.get(r["key"]) == "SLAVE"
        if k not in best or (best[k][0] and not slave):
            best[k] = (slave, r["node"], int(r["at"] or c.at_ms), c)
    return [(k[0], k[1], node, at, c) for k, (_s, node, at, c) in sorted(best.items())]


def judge_commits(
    commits: list[dict],
    roles: dict[str, str],
    events: list[dict],
    seed: dict[tuple[str, str, int], CommitPoint] | None = None,
) -> CommitHistory:
    """Judge every commit record (``commit`` rows of the chunk tasks; ``roles`` maps a chunk key
    to its manifest's role). A value lower than the previous one of its queue with no reset
    record between them is a ``regression``, with both records as witnesses. ``seed``: each
    queue's newest point a passing run judged (the audit state): the first new record of a
    queue is compared with it, and a record at or before it in log order (a chunk read again
    for continuity) was judged then and is not judged again."""
    out = CommitHistory(last=dict(seed or {}))
    last = out.last
    for epoch, off, node, at, c in ordered_records(commits, roles):
        new = {q: v for q, v in c.offsets.items() if not _judged(last, c, q, epoch, off)}
        if not new:
            continue
        out.records += 1
        g = out.groups.setdefault(
            c.group, {"commits": 0, "fromMs": at, "toMs": at, "queues": set()}
        )
        g["commits"] += 1
        g["fromMs"], g["toMs"] = min(g["fromMs"], at), max(g["toMs"], at)
        g["queues"].update((c.topic, q) for q in new)
        for q, value in sorted(new.items()):
            point = CommitPoint(epoch, off, node, at, value, c.is_reset)
            prev = last.get((c.group, c.topic, q))
            if prev is not None and not point.reset and value < prev.value:
                out.violations.append(_regression(c.group, c.topic, q, prev, point, events))
            last[(c.group, c.topic, q)] = point
    return out


def _judged(last: dict, c: OffsetCommit, q: int, epoch: int, off: int) -> bool:
    prev = last.get((c.group, c.topic, q))
    return prev is not None and (epoch, off) <= (prev.epoch, prev.log_offset)


def _regression(group, topic, q, before: CommitPoint, after: CommitPoint, events) -> dict:
    failovers = [
        f"{e['node']} {e.get('from')}->{e.get('to')}"
        for e in events
        if e["kind"] == "role_changed" and before.at_ms < e["at"] <= after.at_ms
    ]
    return {
        "kind": "regression",
        "evidence": EVIDENCE_RECORDS,
        "group_name": group,
        "topic": topic,
        "queue_id": q,
        "before": before.value,
        "node_before": before.node,
        "epoch_before": before.epoch,
        "at_before": before.at_ms,
        "log_offset_before": before.log_offset,
        "after": after.value,
        "node_after": after.node,
        "epoch_after": after.epoch,
        "at_after": after.at_ms,
        "log_offset_after": after.log_offset,
        "failover": "; ".join(failovers),
        "reconsumed_messages": before.value - after.value,
    }


def snapshot_groups(snapshots) -> dict[str, tuple[list[int], int]]:
    """Per consumer group, the times of the master snapshots that carry its offsets and how
    many queues they name."""
    out: dict[str, set[int]] = {}
    queues: dict[str, set[tuple[str, str]]] = {}
    for s in snapshots:
        if s.role == "SLAVE":
            continue
        for key, by_queue in s.consumerOffsets.items():
            topic, _, group = key.partition("@")
            out.setdefault(group, set()).add(s.takenAt)
            queues.setdefault(group, set()).update((topic, str(q)) for q in by_queue)
    return {g: (sorted(ts), len(queues[g])) for g, ts in out.items()}


def coverage(history: CommitHistory, snapshots) -> dict[str, dict]:
    """Per consumer group, what its offset verdict stands on: ``evidence`` (records or
    snapshots), ``points`` judged, the ``queues`` they name, the time covered and ``blindWindowMs``, the longest interval
    in which a commit could have happened unobserved (0 when every commit is a record; the
    longest gap between consecutive master snapshots otherwise; null when one snapshot alone
    saw the group, which bounds nothing)."""
    masters = sorted({s.takenAt for s in snapshots if s.role != "SLAVE"})
    out = {}
    for g, (times, queues) in snapshot_groups(snapshots).items():
        pairs = zip(masters, masters[1:], strict=False)
        gaps = [b - a for a, b in pairs if a >= times[0] and b <= times[-1]]
        out[g] = {
            "evidence": EVIDENCE_SNAPSHOTS,
            "points": len(times),
            "queues": queues,
            "coveredFromMs": times[0],
            "coveredToMs": times[-1],
            "blindWindowMs": max(gaps) if gaps else None,
        }
    for g, info in history.groups.items():
        out[g] = {
            "evidence": EVIDENCE_RECORDS,
            "points": info["commits"],
            "queues": len(info["queues"]),
            "coveredFromMs": info["fromMs"],
            "coveredToMs": info["toMs"],
            "blindWindowMs": 0,
        }
    return dict(sorted(out.items()))


def judge_offsets(
    commits: list[dict], windowed: dict, snapshots, events, snap_violations, seed=None
):
    """Check 4's findings for one group: every commit record judged (``roles`` from the chunk
    manifests; ``seed`` the queues' points of the audit state), and snapshot findings only for
    consumer groups that have no records (real RocketMQ, or a node with
    ``offsetCommitThroughLog=false``). Returns (violations, the :class:`CommitHistory`, the
    ``offsets`` part of verdict.json)."""
    roles = {c["key"]: c.get("role") for cs in windowed.values() for c in cs}
    history = judge_commits(commits, roles, events, seed)
    by_records = set(history.groups)
    kept = [v for v in snap_violations if v["group_name"] not in by_records]
    groups = coverage(history, snapshots)
    blind = [g["blindWindowMs"] for g in groups.values()]
    doc = {
        "blindWindowMs": None if None in blind else max(blind, default=0),
        "records": history.records,
        "groups": groups,
    }
    return history.violations + kept, history, doc
