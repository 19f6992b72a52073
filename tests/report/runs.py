"""Audit runs written by hand into a file:// root, as the audit writes them (contracts tables,
verdict.json) beside an archive of snapshots and events: a master, a slave, a failover.

Scenarios: ``passing``, ``failing`` (a divergence, lost acknowledged bytes, an offset
regression across the failover), ``missing_object`` (a chunk's .log absent) and ``incomplete``
(verdict.json and two tables never written).
"""

from __future__ import annotations

import io
import json

import pandas as pd

from contracts import archive_layout as layout
from contracts import audit_tables as at
from contracts.record.builder import encode_message
from contracts.record.model import Message
from contracts.record.reader import decode_record, record_to_json

CLUSTER = "c1"
GROUP = "broker-a"
M, S = "broker-a-0", "broker-a-1"
T0 = 1_790_000_000_000  # 2026-09-21, ms
STEP_MS = 5_000
FAILOVER_AT = T0 + 60_000
END_AT = T0 + 120_000
DIVERGE_AT = 1_048_576 + 4_321
LOST = (2_000_000, 2_100_000)
# both replicas' bytes around DIVERGE_AT as spark_jobs/witness.py writes them: two bytes
# differ, the first at DIVERGE_AT (byte 64 of the window)
_M_WINDOW = (
    b"\x00\x00\x00\xb2\xda\xa3\x20\xa7" * 8 + b"hello world, from the master.\n" + bytes(range(34))
)
_S_WINDOW = bytearray(_M_WINDOW)
_S_WINDOW[64] ^= 0x20
_S_WINDOW[75] ^= 0x01
DIFFERING_BYTES = 2
DIVERGENCE = {
    "firstDifferingOffset": DIVERGE_AT,
    "differingBytes": DIFFERING_BYTES,
    "window": {
        "start": DIVERGE_AT - 64,
        "master": _M_WINDOW.hex(),
        "slave": bytes(_S_WINDOW).hex(),
    },
}
RESET_AT = T0 + 95_000


def put_table(store, prefix: str, name: str, rows: list[dict]) -> None:
    cols = at.TABLE_COLUMNS[name]
    df = pd.DataFrame(rows, columns=list(cols))
    df = df.astype({c: t for c, t in cols.items() if rows or t != "object"})
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    store.put_mutable(f"{prefix}{name}.parquet", buf.getvalue())


def record(topic: str, queue_offset: int, phys: int, body: bytes, ts: int) -> dict:
    enc = encode_message(Message(topic, body, queue_id=1), ("10.0.0.7", 10911))
    data = bytes(enc.stamp(queue_offset, phys, ts))
    return record_to_json(decode_record(data, base_offset=phys))


def write_archive(store) -> None:
    """Snapshots every 5 s from both nodes, a failover at +60 s (S becomes master, epoch 2)."""
    for t in range(T0, END_AT + 1, STEP_MS):
        before = t < FAILOVER_AT
        master, slave = (M, S) if before else (S, M)
        epoch = 1 if before else 2
        max_phy = 1_000_000 + (t - T0) * 50
        lag = 40_000 + ((t - T0) // STEP_MS % 5) * 30_000
        for node in (master, slave):
            is_master = node == master
            snap = layout.Snapshot(
                node=node,
                brokerName=GROUP,
                brokerId=0 if is_master else 1,
                role="SYNC_MASTER" if is_master else "SLAVE",
                epoch=epoch,
                takenAt=t,
                maxPhyOffset=max_phy if is_master else max_phy - lag,
                flushedOffset=max_phy,
                confirmOffset=max_phy - lag,
                slaves={slave: max_phy - lag} if is_master else {},
            )
            store.put(layout.snapshot_key(CLUSTER, GROUP, node, t), snap.to_json())
    events = [
        (M, T0, "started", 1, {}),
        (S, T0, "started", 1, {}),
        (M, FAILOVER_AT - 1_000, "master_lost", 1, {}),
        (S, FAILOVER_AT, "role_changed", 2, {"from": "SLAVE", "to": "SYNC_MASTER"}),
        (M, FAILOVER_AT + 2_000, "role_changed", 2, {"from": "SYNC_MASTER", "to": "SLAVE"}),
        (
            S,
            RESET_AT,
            "offset_reset",
            2,
            {"group": "g1", "topic": "T", "queue": 1, "from": 300, "to": 250},
        ),
    ]
    for node, at_ms, kind, epoch, extra in events:
        doc = layout.make_event(kind, node, CLUSTER, GROUP, at_ms, epoch, **extra)
        store.put(layout.event_key(CLUSTER, GROUP, node, at_ms, kind), layout.json_bytes(doc))
    # a snapshot that is not JSON: skipped by the report's reader, with a note
    store.put(f"{layout.node_prefix(CLUSTER, GROUP, M)}snapshots/{T0 + 1:013d}.json", b"{oops")


def timeline(regress: bool) -> list[dict]:
    rows = []
    for t in range(T0, END_AT + 1, STEP_MS):
        before = t < FAILOVER_AT
        for node in (M, S):
            role = "SYNC_MASTER" if (node == M) == before else "SLAVE"
            for q in (0, 1):
                committed = 100 + (t - T0) // 1000 * (q + 1)
                if q == 1 and t >= RESET_AT:
                    committed -= 50  # the recorded offset_reset: not a violation
                if regress and q == 0 and not before and t < FAILOVER_AT + 20_000:
                    committed -= 40  # the new master restarted from an older copy
                if role == "SLAVE":
                    committed -= 3
                rows.append(
                    {
                        "taken_at": t,
                        "node": node,
                        "role": role,
                        "epoch": 1 if before else 2,
                        "group_name": "g1",
                        "topic": "T",
                        "queue_id": q,
                        "committed": committed,
                        "queue_max": float(committed + 10),
                    }
                )
    return rows


def ranges(diverge: bool) -> list[dict]:
    def r(start, end, verdict, first_diff=None, detail=""):
        return {
            "pair": f"{M}->{S}",
            "master": M,
            "node": S,
            "start": start,
            "end": end,
            "bytes": end - start,
            "verdict": verdict,
            "allowed": False,
            "lag_exceeded": False,
            "first_diff": first_diff,
            "detail": detail,
        }

    mb = 1_048_576
    if not diverge:
        return [r(0, 4 * mb, at.MATCH), r(4 * mb, 4 * mb + 60_000, at.LAG, detail="tail")]
    return [
        r(0, mb, at.MATCH),
        r(mb, 2 * mb, at.DIVERGENT, float(DIVERGE_AT), json.dumps(DIVERGENCE)),
        r(2 * mb, 4 * mb, at.MATCH),
        r(4 * mb, 4 * mb + 60_000, at.LAG, detail="tail"),
    ]


#: verdict.json's offsets coverage: g1's commits are records, g2 only in snapshots a minute apart
OFFSETS = {
    "blindWindowMs": 60_000,
    "records": 42,
    "groups": {
        "g1": {
            "evidence": "records",
            "points": 42,
            "queues": 2,
            "coveredFromMs": T0,
            "coveredToMs": END_AT,
            "blindWindowMs": 0,
        },
        "g2": {
            "evidence": "snapshots",
            "points": 3,
            "queues": 1,
            "coveredFromMs": T0,
            "coveredToMs": T0 + 120_000,
            "blindWindowMs": 60_000,
        },
        "<g3>": {
            "evidence": "snapshots",
            "points": 1,
            "queues": 1,
            "coveredFromMs": T0,
            "coveredToMs": T0,
            "blindWindowMs": None,
        },
    },
}
#: verdict.json's delivery: one key stored twice, g1 queue 0 sent 39 messages again
DELIVERY = {
    "enqueued": 4_000,
    "duplicated": 1,
    "redelivered": 39,
    "lost": 0,
    "topics": {"T": {"enqueued": 4_000, "duplicated": 1, "keys": 1, "maxGapMs": 3_000}},
    "duplicateExamples": [
        {
            "topic": "T",
            "uniqKey": "AC1100",
            "copies": 2,
            "gapMs": 3_000,
            "msgIds": ["0A00000100002A9F0000000000000010", "0A00000100002A9F0000000000100010"],
        }
    ],
    "groups": {
        "g1": {
            "redelivered": 39,
            "rewinds": 1,
            "queues": {"T/0": {"redelivered": 39, "rewinds": 1}},
        }
    },
}


def _check(name, findings, evidence, detail=""):
    status = at.check_status(findings, evidence)
    return at.CheckResult(name, status, findings, evidence, detail)


def write_run(store, run_id: str, scenario: str) -> str:
    """Write the audit outputs of ``scenario``; returns the group's prefix."""
    prefix = f"{layout.audit_run_prefix(run_id)}{GROUP}/"
    failing = scenario == "failing"
    tables: dict[str, list[dict]] = {name: [] for name in at.TABLES}
    tables["ranges"] = ranges(diverge=failing)
    tables["offset_timeline"] = timeline(regress=failing)
    if failing:
        tables["acked_losses"] = [
            {
                "kind": "slave_ack",
                "slave": S,
                "lost_start": LOST[0],
                "lost_end": LOST[1],
                "ack": LOST[1],
                "verdict": at.MISSING,
                "snapshot": layout.snapshot_key(CLUSTER, GROUP, M, T0 + 40_000),
            }
        ]
        tables["offset_violations"] = [
            {
                "kind": "regression",
                "group_name": "g1",
                "topic": "T",
                "queue_id": 0,
                "before": 159,
                "node_before": M,
                "epoch_before": 1,
                "at_before": FAILOVER_AT - 5_000,
                "after": 120,
                "node_after": S,
                "epoch_after": 2,
                "at_after": FAILOVER_AT,
                "failover": f"{M} -> {S} at epoch 2",
                "reconsumed_messages": 39,
            }
        ]
    if scenario == "missing_object":
        key = layout.chunk_key(CLUSTER, GROUP, S, 1_048_576, 2_097_152, 1)
        tables["archive_faults"] = [
            {
                "node": S,
                "key": key,
                "kind": at.FAULT_LOG_MISSING,
                "start": 1_048_576.0,
                "end": 2_097_152.0,
                "detail": "manifest present, .log absent",
            }
        ]
    checks = [
        _check(at.ARCHIVE_INTEGRITY, len(tables["archive_faults"]), 12),
        _check(at.REPLICA_CONSISTENCY, int(failing), 4 * 1_048_576),
        _check(at.ACKNOWLEDGED_DURABILITY, len(tables["acked_losses"]), 24),
        _check(at.LOG_INTEGRITY, 0, 4_100, "4100 records checked"),
        _check(
            at.OFFSET_MONOTONICITY, len(tables["offset_violations"]), len(tables["offset_timeline"])
        ),
        at.CheckResult(at.DELIVERY, at.STATUS_PASS, 0, 4_000, "4000 enqueued, 1 duplicated"),
    ]
    tables["checks"] = [
        {
            "check": c.check,
            "status": c.status,
            "findings": c.findings,
            "evidence": c.evidence,
            "reason": c.reason,
        }
        for c in checks
    ]
    status = at.run_status([c.status for c in checks])
    witnesses = []
    if failing:
        witnesses.append(
            {
                "pair": f"{M}->{S}",
                "first_diff": DIVERGE_AT,
                "master_key": layout.chunk_key(CLUSTER, GROUP, M, 1_048_576, 2_097_152, 1),
                "node_key": layout.chunk_key(CLUSTER, GROUP, S, 1_048_576, 2_097_152, 1),
                "master_record": record("T", 77, DIVERGE_AT - 40, b"hello world", T0 + 30_000),
                "node_record": record("T", 77, DIVERGE_AT - 40, b"hellO world!", T0 + 30_000),
                "window": DIVERGENCE["window"],
                "differing_bytes": DIFFERING_BYTES,
            }
        )
    verdict = {
        "runId": run_id,
        "cluster": CLUSTER,
        "brokerName": GROUP,
        "master": M,
        "window": {"since": None, "until": None},
        "status": status,
        "passed": at.run_passed(status, False),
        "requireEvidence": False,
        "counts": {},
        "bytes": {},
        "checks": [c.to_json() for c in checks],
        "recordsChecked": 4_100,
        "findings": {},
        "witnesses": {"divergent": witnesses},
        "offsets": OFFSETS,
        "delivery": DELIVERY,
    }
    skip = {"offset_violations", "acked_losses"} if scenario == "incomplete" else set()
    for name, rows in tables.items():
        if name not in skip:
            put_table(store, prefix, name, rows)
    if scenario != "incomplete":
        store.put_mutable(prefix + "verdict.json", json.dumps(verdict, indent=2).encode())
    return prefix
