"""Incremental audits: verified watermarks in ``ROOT/v1/{cluster}/{brokerName}/_audit/state.json``.

A passing run records, per node, the end of the log it verified; the last committed offset per
(group, topic, queue) seen on a master; the newest snapshot time; and the highest acknowledged
offset any master promised. An ``--incremental`` run then checks only chunks that end beyond a
node's watermark (plus the last verified chunk, so queue offsets and the record chain are checked
across the boundary), compares replica bytes only above the pair's watermark, and reads only
newer snapshots, seeding the offset timeline with the recorded points. A failing run leaves the
state untouched, so the next run checks the same data again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from contracts import archive_layout as layout
from contracts.archive_layout import Snapshot
from contracts.errors import AuditInputError, ObjectNotFoundError

STATE_VERSION = 1


@dataclass
class AuditState:
    verified: dict[str, int] = field(default_factory=dict)  # node -> verified log end
    offsets: dict[str, dict] = field(default_factory=dict)  # "group@topic@queue" -> point
    last_snapshot_at: int = -1
    max_ack: list = field(default_factory=lambda: [0, 0, ""])  # (offset, at, snapshot)
    run_id: str = ""
    # key -> parsed JSON of the manifests, snapshots and events a passing run read: archive
    # objects never change, so an incremental run reads only the ones not listed here (the
    # listing itself is always fresh)
    objects: dict[str, dict] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": STATE_VERSION,
                "verified": self.verified,
                "offsets": self.offsets,
                "lastSnapshotAt": self.last_snapshot_at,
                "maxAck": self.max_ack,
                "runId": self.run_id,
                "objects": self.objects,
            },
            sort_keys=True,
            indent=1,
        ).encode()


def load_state(store, cluster: str, broker_name: str) -> AuditState:
    key = layout.audit_state_key(cluster, broker_name)
    try:
        doc = json.loads(store.get(key))
    except ObjectNotFoundError:
        return AuditState()
    except ValueError as exc:
        raise AuditInputError(f"{store.root}/{key} is not JSON: {exc}") from exc
    if doc.get("version") != STATE_VERSION:
        raise AuditInputError(f"{store.root}/{key}: unknown state version {doc.get('version')}")
    return AuditState(
        verified={k: int(v) for k, v in doc.get("verified", {}).items()},
        offsets=doc.get("offsets", {}),
        last_snapshot_at=int(doc.get("lastSnapshotAt", -1)),
        max_ack=list(doc.get("maxAck", [0, 0, ""])),
        run_id=doc.get("runId", ""),
        objects=doc.get("objects", {}),
    )


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


def next_state(
    state: AuditState,
    run_id: str,
    node_ends: dict[str, int],
    timeline: list[dict],
    snapshots: list[Snapshot],
    max_ack: tuple[int, int, str] | None,
    objects: dict[str, dict] | None = None,
) -> AuditState:
    new = AuditState(
        verified=dict(state.verified),
        offsets=dict(state.offsets),
        last_snapshot_at=state.last_snapshot_at,
        max_ack=list(state.max_ack),
        run_id=run_id,
        objects=dict(objects if objects is not None else state.objects),
    )
    for node, end in node_ends.items():
        new.verified[node] = max(end, new.verified.get(node, 0))
    for row in sorted(timeline, key=lambda r: r["taken_at"]):
        if row["role"] == "SLAVE":
            continue
        key = f"{row['group_name']}@{row['topic']}@{row['queue_id']}"
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
    return new
