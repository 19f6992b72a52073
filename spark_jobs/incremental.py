"""Incremental audits: verified watermarks in ``ROOT/v1/{cluster}/{brokerName}/_audit/state.json``.

A passing run records, per node, the end of the log it verified, where the next run's listing of
its ``commitlog/`` resumes (the chunk holding the group's lowest verified offset, so every pair is
compared from its watermark and the record chain and queue offsets are checked across the
boundary), the last chunk it verified and the last snapshot and event keys it read; per (group,
topic, queue) the last committed point of a master, and the last point of each node; the newest
snapshot time; the highest acknowledged offset any master promised; and per (group, topic,
queue) the newest offset commit record judged (``commitPoints``), so a regression between two
runs is found by the second. Its size is
O(nodes x queues), whatever the archive's age (version 1 kept the JSON of every object read).

An ``--incremental`` run lists each node's prefixes from those keys (``StartAfter``), checks only
chunks that end beyond a node's watermark (plus the last verified one), compares replica bytes only
above the pair's watermark, and reads only newer snapshots and events, seeding the offset timeline
with the recorded points. A failing run leaves the state untouched, so the next run checks the
same data again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from contracts import archive_layout as layout
from contracts.archive_layout import Snapshot
from contracts.audit_state import (
    FIELD_LAST_SNAPSHOT_AT,
    FIELD_VERIFIED,
    FIELD_VERSION,
    STATE_VERSION,
)
from contracts.errors import AuditInputError, ObjectNotFoundError, ObjectTooLargeError
from contracts.read_limits import MAX_JSON_DOC_BYTES, load_json_doc
from spark_jobs.commit_history import CommitPoint


@dataclass
class NodeMark:
    """Where one node's archive was verified up to, and where its listings resume."""

    commitlog_after: str = ""  # start_after key for its commitlog/ listing ("" = from the start)
    last_chunk: str = ""  # key of the last chunk verified
    last_snapshot: str = ""  # key of the last snapshot read
    # listing start of its events/: held back to the oldest recorded offset point, so the
    # resets and failovers between that point and the next snapshots are read again
    last_event: str = ""
    role: str = ""  # its role in the newest snapshot or chunk read
    events_seen: str = ""  # key of the newest event a passing run read

    def to_doc(self) -> dict:
        return {
            "commitlogAfter": self.commitlog_after,
            "lastChunk": self.last_chunk,
            "lastSnapshot": self.last_snapshot,
            "lastEvent": self.last_event,
            "role": self.role,
            "eventsSeen": self.events_seen,
        }

    @classmethod
    def from_doc(cls, doc: dict) -> NodeMark:
        return cls(
            str(doc.get("commitlogAfter", "")),
            str(doc.get("lastChunk", "")),
            str(doc.get("lastSnapshot", "")),
            str(doc.get("lastEvent", "")),
            str(doc.get("role", "")),
            str(doc.get("eventsSeen", "")),
        )


@dataclass
class AuditState:
    verified: dict[str, int] = field(default_factory=dict)  # node -> verified log end
    offsets: dict[str, dict] = field(default_factory=dict)  # "group@topic@queue" -> master point
    # "group@topic@queue" -> node -> its last point (committed, at, role, epoch)
    node_points: dict[str, dict] = field(default_factory=dict)
    last_snapshot_at: int = -1
    max_ack: list = field(default_factory=lambda: [0, 0, ""])  # (offset, at, snapshot)
    run_id: str = ""
    nodes: dict[str, NodeMark] = field(default_factory=dict)
    master: str = ""  # the master at the end of the verified history
    # "group@topic@queue" -> its newest commit record judged (value, epoch, logOffset, node,
    # at, reset): the next run compares that queue's first new record with it
    commits: dict[str, dict] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                FIELD_VERSION: STATE_VERSION,
                FIELD_VERIFIED: self.verified,
                "offsets": self.offsets,
                "nodePoints": self.node_points,
                FIELD_LAST_SNAPSHOT_AT: self.last_snapshot_at,
                "maxAck": self.max_ack,
                "runId": self.run_id,
                "nodes": {n: m.to_doc() for n, m in sorted(self.nodes.items())},
                "master": self.master,
                "commitPoints": self.commits,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()

    def marks(self) -> dict[str, NodeMark] | None:
        """Per node listing marks, or None when this state cannot resume listings (first run)."""
        return dict(self.nodes) if self.nodes else None


def load_state(store, cluster: str, broker_name: str) -> AuditState:
    key = layout.audit_state_key(cluster, broker_name)
    try:
        doc = load_json_doc(store.get(key, MAX_JSON_DOC_BYTES), key)
    except ObjectNotFoundError:
        return AuditState()
    except ObjectTooLargeError as exc:
        raise AuditInputError(str(exc)) from exc
    except ValueError as exc:
        raise AuditInputError(f"{store.root}/{key} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise AuditInputError(f"{store.root}/{key}: not a JSON object")
    if doc.get("version") == 1:
        doc = migrate_v1(doc, cluster, broker_name)
    if doc.get("version") != STATE_VERSION:
        raise AuditInputError(f"{store.root}/{key}: unknown state version {doc.get('version')}")
    try:
        return AuditState(
            verified={k: int(v) for k, v in doc.get(FIELD_VERIFIED, {}).items()},
            offsets=dict(doc.get("offsets", {})),
            node_points=dict(doc.get("nodePoints", {})),
            last_snapshot_at=int(doc.get(FIELD_LAST_SNAPSHOT_AT, -1)),
            max_ack=list(doc.get("maxAck", [0, 0, ""])),
            run_id=str(doc.get("runId", "")),
            nodes={n: NodeMark.from_doc(m) for n, m in doc.get("nodes", {}).items()},
            master=str(doc.get("master", "")),
            commits={str(k): _commit_doc(v) for k, v in doc.get("commitPoints", {}).items()},
        )
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise AuditInputError(f"{store.root}/{key}: malformed state: {exc!r}") from exc


def _commit_doc(v: dict) -> dict:
    keys = ("value", "epoch", "logOffset", "at")
    return {**{k: int(v[k]) for k in keys}, "node": str(v["node"]), "reset": bool(v["reset"])}


def commit_seed(state: AuditState) -> dict[tuple[str, str, int], CommitPoint]:
    """The state's last commit point per (group, topic, queue), as the commit history's
    seed."""
    out = {}
    for key, p in state.commits.items():
        group, topic, queue = key.split("@")
        out[(group, topic, int(queue))] = CommitPoint(
            p["epoch"], p["logOffset"], p["node"], p["at"], p["value"], p["reset"]
        )
    return out


def commit_points(last: dict[tuple[str, str, int], CommitPoint]) -> dict[str, dict]:
    """The commit history's last points as the state's ``commitPoints``."""
    return {
        f"{g}@{t}@{q}": {
            "value": p.value,
            "epoch": p.epoch,
            "logOffset": p.log_offset,
            "node": p.node,
            "at": p.at_ms,
            "reset": p.reset,
        }
        for (g, t, q), p in sorted(last.items())
    }


def migrate_v1(doc: dict, cluster: str, broker_name: str) -> dict:
    """Version 1 (``objects``: the JSON of every object a run read) to version 2: the
    watermarks carry over; per node, the last snapshot and event keys and the last verified
    chunk are taken from the keys ``objects`` named. The commitlog listing resumes from the
    start once (a v1 state does not say which chunk holds the group's low watermark)."""
    verified = {k: int(v) for k, v in doc.get("verified", {}).items()}
    nodes: dict[str, dict] = {}
    for key in sorted(doc.get("objects", {})):
        parsed = layout.parse_key(key)
        if parsed is None or (parsed.cluster, parsed.broker_name) != (cluster, broker_name):
            continue
        mark = nodes.setdefault(parsed.node, NodeMark().to_doc())
        if parsed.kind == "snapshot":
            mark["lastSnapshot"] = key
        elif parsed.kind == "event":
            mark["eventsSeen"] = key  # (lastEvent stays: read them again once)
        elif parsed.kind == "manifest" and parsed.end <= verified.get(parsed.node, -1):
            mark["lastChunk"] = key[: -len(".json")] + ".log"
    out = {k: v for k, v in doc.items() if k != "objects"}
    out.update(version=STATE_VERSION, nodes=nodes, nodePoints={}, master="")
    return out


def save_state(store, cluster: str, broker_name: str, state: AuditState) -> None:
    store.put_mutable(layout.audit_state_key(cluster, broker_name), state.to_json())


def chunks_to_check(chunks: list[dict], verified_end: int) -> list[dict]:
    """Chunks ending past the watermark, plus the last one at or below it (continuity)."""
    new = [c for c in chunks if c["end"] > verified_end]
    old = [c for c in chunks if c["end"] <= verified_end]
    if old and new:
        new.insert(0, max(old, key=lambda c: c["end"]))
    return new


def seed_snapshots(state: AuditState, broker_name: str) -> list[Snapshot]:
    """The recorded last master points, as synthetic snapshots at their own times."""
    seeds = []
    for key, p in state.offsets.items():
        group, topic, queue = key.split("@")
        seeds.append(
            Snapshot(
                node=p["node"],
                brokerName=broker_name,
                brokerId=0,
                role="SYNC_MASTER",
                epoch=int(p["epoch"]),
                takenAt=int(p["at"]),
                maxPhyOffset=0,
                flushedOffset=0,
                confirmOffset=0,
                consumerOffsets={f"{topic}@{group}": {queue: int(p["committed"])}},
                queueMaxOffsets={},
            )
        )
    return seeds


def resume_key(chunks: list[dict], low: int, old: str) -> str:
    """The ``start_after`` of a node's next commitlog listing: just before the last of its
    ``chunks`` (this run's listing, sorted by start) that starts below ``low``, the group's
    lowest verified offset, so the next run sees the chunk holding it and every later one."""
    below = [c for c in chunks if c["start"] < low]
    if not below:
        return old
    key = max(below, key=lambda c: c["start"])["key"]
    return layout.resume_after(key, 20)  # "{start:020d}" sorts before "{start:020d}-..."


def _event_at(key: str) -> int:
    return int(layout.key_name(key)[:13])


def next_marks(
    state: AuditState, ga, verified: dict[str, int], hold_ms: int
) -> dict[str, NodeMark]:
    """Per node marks after a passing run over ``ga`` (what this run listed); events after
    ``hold_ms`` will be listed again."""
    ends = [v for n, v in verified.items() if v > 0 and n in ga.nodes]
    low = min(ends, default=0)
    marks = {n: NodeMark(**vars(m)) for n, m in state.nodes.items()}
    for node, na in ga.nodes.items():
        m = marks.setdefault(node, NodeMark())
        m.commitlog_after = resume_key(na.chunks, low, m.commitlog_after)
        done = [c for c in na.chunks if c["end"] <= verified.get(node, 0)]
        if done:
            m.last_chunk = max(done, key=lambda c: (c["end"], c["key"]))["key"]
        if na.snapshot_keys:
            m.last_snapshot = max(m.last_snapshot, na.snapshot_keys[-1])
        if na.event_keys:
            m.events_seen = max(m.events_seen, na.event_keys[-1])
            judged = [k for k in na.event_keys if _event_at(k) < hold_ms]
            if judged:
                m.last_event = max(m.last_event, judged[-1])
        role = na.role_at_end()
        if role:
            m.role = role
    return marks


def next_state(
    state: AuditState,
    run_id: str,
    node_ends: dict[str, int],
    timeline: list[dict],
    snapshots: list[Snapshot],
    max_ack: tuple[int, int, str] | None,
    ga=None,
    master: str = "",
    commits: dict[str, dict] | None = None,
) -> AuditState:
    new = AuditState(
        verified=dict(state.verified),
        offsets=dict(state.offsets),
        node_points={k: dict(v) for k, v in state.node_points.items()},
        last_snapshot_at=state.last_snapshot_at,
        max_ack=list(state.max_ack),
        run_id=run_id,
        nodes=dict(state.nodes),
        master=master or state.master,
        commits={**state.commits, **(commits or {})},
    )
    for node, end in node_ends.items():
        new.verified[node] = max(end, new.verified.get(node, 0))
    for row in sorted(timeline, key=lambda r: r["taken_at"]):
        key = f"{row['group_name']}@{row['topic']}@{row['queue_id']}"
        new.node_points.setdefault(key, {})[row["node"]] = {
            "committed": row["committed"],
            "at": row["taken_at"],
            "role": row["role"],
            "epoch": row["epoch"],
        }
        if row["role"] == "SLAVE":
            continue
        new.offsets[key] = {
            "committed": row["committed"],
            "at": row["taken_at"],
            "node": row["node"],
            "epoch": row["epoch"],
        }
    if snapshots:
        new.last_snapshot_at = max(new.last_snapshot_at, max(s.takenAt for s in snapshots))
    if max_ack and max_ack[0] > new.max_ack[0]:
        new.max_ack = list(max_ack)
    if ga is not None:
        hold = min([new.last_snapshot_at, *(int(p["at"]) for p in new.offsets.values())])
        new.nodes = next_marks(state, ga, new.verified, hold)
    return new
