"""Check 2, acknowledged durability: every byte a master acknowledged (a snapshot's ``slaves``
ack offsets, its ``confirmOffset``) is on the slave that acknowledged it, on the new master after
a failover, and never removed by a truncation. Each loss names the range and the snapshot that
promised it (``acked_losses`` rows)."""

from __future__ import annotations

from contracts import archive_layout as layout
from contracts import audit_tables as T
from spark_jobs.archive_reader import GroupArchive

_NOT_LOST = (T.MATCH, T.EXPIRED)  # ranges below an ack that are no loss (expired: pruned)


def promises(ga: GroupArchive, since_snapshot_at: int = -1) -> int:
    """How many acknowledgements there are to judge: per master snapshot after
    ``since_snapshot_at``, its slaves' ack offsets and a non-zero confirmOffset."""
    n = 0
    for na in ga.nodes.values():
        for snap in na.snapshots:
            if snap.role != "SLAVE" and snap.takenAt > since_snapshot_at:
                n += sum(1 for a in snap.slaves.values() if a > 0) + (snap.confirmOffset > 0)
    return n


def acked_durability(
    ga: GroupArchive,
    master: str,
    ranges: list[dict],
    since_snapshot_at: int = -1,
    prior_promise: tuple[int, int, str] | None = None,
) -> list[dict]:
    findings = []
    for na in ga.nodes.values():
        for snap in na.snapshots:
            if snap.role == "SLAVE" or snap.takenAt <= since_snapshot_at:
                continue
            for slave, ack in snap.slaves.items():
                pair = f"{na.node}->{slave}"
                for r in ranges:
                    if r["pair"] != pair or r["start"] >= ack or r["verdict"] in _NOT_LOST:
                        continue
                    if r.get("allowed") or r.get("acked_tail"):
                        continue  # the slave's own old-master tail: judged below
                    findings.append(
                        {
                            "kind": "ack_not_on_slave",
                            "slave": slave,
                            "lost_start": r["start"],
                            "lost_end": min(r["end"], ack),
                            "verdict": r["verdict"],
                            "snapshot": layout.snapshot_name(na.node, snap.takenAt),
                            "ack": ack,
                        }
                    )
    for r in ranges:
        if not r.get("acked_tail"):
            continue
        node = r["pair"].split("->", 1)[1]
        cut = [
            e for e in ga.nodes[node].events if e["kind"] == "truncated" and e["to"] <= r["start"]
        ]
        if cut:
            continue  # reported below as acknowledged_bytes_truncated
        ack = r["ack"]
        findings.append(
            {
                "kind": "acknowledged_not_on_new_master",
                "slave": r["pair"].split("->", 1)[0],
                "lost_start": r["start"],
                "lost_end": min(r["end"], ack),
                "verdict": "extra",
                "snapshot": r["ack_snapshot"],
                "ack": ack,
            }
        )
    # (acknowledged offset, at, snapshot, epoch): a truncation into a new epoch may only cut
    # bytes no master of an earlier epoch had acknowledged
    promised: list[tuple[int, int, str, int]] = []
    if prior_promise and prior_promise[0] > 0:
        promised.append((*prior_promise, -1))
    for na in ga.nodes.values():
        for snap in na.snapshots:
            if snap.role != "SLAVE":
                acks = [snap.confirmOffset, *snap.slaves.values()]
                snap_key = layout.snapshot_name(na.node, snap.takenAt)
                promised.append((max(acks), snap.takenAt, snap_key, snap.epoch))
    for na in ga.nodes.values():
        for ev in na.events:
            if ev["kind"] != "truncated":
                continue
            if ev["at"] <= since_snapshot_at:
                continue  # judged by an earlier passing run
            for ack, at, snap, epoch in promised:
                if at <= ev["at"] and epoch < int(ev["epoch"]) and ack > ev["to"]:
                    findings.append(
                        {
                            "kind": "acknowledged_bytes_truncated",
                            "slave": na.node,
                            "lost_start": ev["to"],
                            "lost_end": min(ev["from"], ack),
                            "verdict": "data_loss",
                            "snapshot": snap,
                            "ack": ack,
                        }
                    )
    return findings
