"""Check 2, acknowledged durability: every byte a master acknowledged (a snapshot's ``slaves``
ack offsets, its ``confirmOffset``) is on the slave that acknowledged it, on the new master after
a failover, and never removed by a truncation. Each loss names the range and the snapshot that
promised it (``acked_losses`` rows)."""

from __future__ import annotations

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
    """Every acknowledged byte found lost: on the slave that acknowledged it, on the new
    master after a failover, or cut by a truncation into a later epoch."""
    return [
        *acks_not_on_slaves(ga, ranges, since_snapshot_at),
        *acks_not_on_new_master(ga, ranges),
        *acks_truncated(ga, promises_made(ga, prior_promise), since_snapshot_at),
    ]


def _loss(kind: str, slave: str, start: int, end: int, verdict: str, snapshot: str, ack: int):
    """One ``acked_losses`` row: bytes ``[start, end)`` acknowledged in ``snapshot`` are lost."""
    return {
        "kind": kind,
        "slave": slave,
        "lost_start": start,
        "lost_end": end,
        "verdict": verdict,
        "snapshot": snapshot,
        "ack": ack,
    }


def acks_not_on_slaves(ga: GroupArchive, ranges: list[dict], since_snapshot_at: int) -> list:
    """A master snapshot's slave ack offset covers a range that is not on that slave."""
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
                        _loss(
                            "ack_not_on_slave",
                            slave,
                            r["start"],
                            min(r["end"], ack),
                            r["verdict"],
                            na.snapshot_name(snap.takenAt),
                            ack,
                        )
                    )
    return findings


def acks_not_on_new_master(ga: GroupArchive, ranges: list[dict]) -> list[dict]:
    """An old master's acknowledged tail (``acked_tail`` ranges) the new master lacks, unless
    a truncation removed it (judged by :func:`acks_truncated`)."""
    findings = []
    for r in ranges:
        if not r.get("acked_tail"):
            continue
        old_master, node = r["pair"].split("->", 1)
        cut = [
            e for e in ga.nodes[node].events if e["kind"] == "truncated" and e["to"] <= r["start"]
        ]
        if cut:
            continue  # reported as acknowledged_bytes_truncated
        ack = r["ack"]
        findings.append(
            _loss(
                "acknowledged_not_on_new_master",
                old_master,
                r["start"],
                min(r["end"], ack),
                "extra",
                r["ack_snapshot"],
                ack,
            )
        )
    return findings


def promises_made(
    ga: GroupArchive, prior_promise: tuple[int, int, str] | None = None
) -> list[tuple[int, int, str, int]]:
    """(acknowledged offset, at, snapshot, epoch) of every master snapshot, and the promise
    an earlier passing run carried over (epoch -1)."""
    out: list[tuple[int, int, str, int]] = []
    if prior_promise and prior_promise[0] > 0:
        out.append((*prior_promise, -1))
    for na in ga.nodes.values():
        for snap in na.snapshots:
            if snap.role != "SLAVE":
                acks = [snap.confirmOffset, *snap.slaves.values()]
                out.append((max(acks), snap.takenAt, na.snapshot_name(snap.takenAt), snap.epoch))
    return out


def acks_truncated(
    ga: GroupArchive, made: list[tuple[int, int, str, int]], since_snapshot_at: int
) -> list[dict]:
    """A truncation into a new epoch may only cut bytes no master of an earlier epoch had
    acknowledged before it."""
    findings = []
    for na in ga.nodes.values():
        for ev in na.events:
            if ev["kind"] != "truncated":
                continue
            if ev["at"] <= since_snapshot_at:
                continue  # judged by an earlier passing run
            for ack, at, snap, epoch in made:
                if at <= ev["at"] and epoch < int(ev["epoch"]) and ack > ev["to"]:
                    findings.append(
                        _loss(
                            "acknowledged_bytes_truncated",
                            na.node,
                            ev["to"],
                            min(ev["from"], ack),
                            "data_loss",
                            snap,
                            ack,
                        )
                    )
    return findings
