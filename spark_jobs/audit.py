"""Run the audit checks over one broker group (or every group of a cluster) and write the outputs.

Outputs under ``ROOT/audits/{runId}/{brokerName}/``: ``ranges.parquet``,
``records_issues.parquet``, ``offset_timeline.parquet``, ``offset_violations.parquet`` and
``verdict.json``; ``ROOT/audits/{runId}/verdict.json`` is the run's verdict (the group's own when
the run covers one group, else a cluster summary listing each group's).

Judgement rules (see DESIGN.md section 4):
- replica consistency fails on ``divergent``, ``missing``, ``extra`` and on ``lag`` beyond
  ``max_lag_bytes``; ``unverifiable`` is reported but does not fail the run; a group with a single
  node has no pair to compare and passes this check with a note.
- acknowledged durability fails when a range below a slave's acknowledged offset (a master
  snapshot's ``slaves``) is not ``match``, or a ``truncated`` event removed bytes below an offset
  a master snapshot had acknowledged.
- log integrity fails on any record issue; offset monotonicity on any violation.
"""

from __future__ import annotations

import io
import json
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from broker.archive import layout
from broker.archive.object_store import StoreSpec
from broker.errors import AuditInputError
from spark_jobs import incremental as inc
from spark_jobs.archive_reader import GroupArchive, list_broker_names, load_group
from spark_jobs.log_integrity import run_log_integrity
from spark_jobs.offset_monotonicity import run_offset_monotonicity
from spark_jobs.replica_consistency import run_replica_consistency

FAILING_RANGES = ("divergent", "missing", "extra")
DEFAULT_MAX_LAG_BYTES = 256 * 1024 * 1024


@dataclass
class AuditOptions:
    spec: StoreSpec
    cluster: str
    broker_name: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    run_id: str | None = None
    max_lag_bytes: int = DEFAULT_MAX_LAG_BYTES
    window_bytes: int = 8 * 1024 * 1024
    incremental: bool = False


_T0 = [time.monotonic()]


def _progress(msg: str) -> None:
    """One progress line on stderr, with seconds since the run started."""
    elapsed_s = time.monotonic() - _T0[0]
    print(f"haproof audit: [{elapsed_s:6.1f}s] {msg}", file=sys.stderr, flush=True)


def pick_master(ga: GroupArchive) -> str:
    """The node that is master at the end of the window: the latest master-role snapshot,
    else the node whose chunks carry brokerId 0."""
    best = None
    for na in ga.nodes.values():
        for s in na.snapshots:
            if s.role != "SLAVE" and (best is None or s.takenAt > best[0]):
                best = (s.takenAt, na.node)
    if best:
        return best[1]
    for na in ga.nodes.values():
        if na.chunks and na.chunks[-1]["brokerId"] == 0:
            return na.node
    raise AuditInputError(f"{ga.cluster}/{ga.broker_name}: cannot tell which node is the master")


def _in_window(c: dict, since: int | None, until: int | None) -> bool:
    if since is not None and c["lastStoreTs"] and c["lastStoreTs"] < since:
        return False
    if until is not None and c["firstStoreTs"] and c["firstStoreTs"] > until:
        return False
    return True


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
                pair = f"{master}->{slave}"
                for r in ranges:
                    if r["pair"] != pair or r["start"] >= ack or r["verdict"] == "match":
                        continue
                    if na.node != master:
                        continue  # an old master's promise is checked through truncations
                    findings.append(
                        {
                            "kind": "ack_not_on_slave",
                            "slave": slave,
                            "lost_start": r["start"],
                            "lost_end": min(r["end"], ack),
                            "verdict": r["verdict"],
                            "snapshot": f"{na.node}/snapshots/{snap.takenAt:013d}.json",
                            "ack": ack,
                        }
                    )
    promised: list[tuple[int, int, str]] = []  # (acknowledged offset, at, snapshot)
    if prior_promise and prior_promise[0] > 0:
        promised.append(tuple(prior_promise))
    for na in ga.nodes.values():
        for snap in na.snapshots:
            if snap.role != "SLAVE":
                acks = [snap.confirmOffset, *snap.slaves.values()]
                promised.append(
                    (max(acks), snap.takenAt, f"{na.node}/snapshots/{snap.takenAt:013d}.json")
                )
    for na in ga.nodes.values():
        for ev in na.events:
            if ev["kind"] != "truncated":
                continue
            if ev["at"] <= since_snapshot_at:
                continue  # judged by an earlier passing run
            for ack, at, snap in promised:
                if at <= ev["at"] and ack > ev["to"]:
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


def audit_group(spark, opts: AuditOptions, store, broker_name: str, run_id: str) -> dict:
    ga = load_group(store, opts.cluster, broker_name)
    master = pick_master(ga)
    state = inc.load_state(store, opts.cluster, broker_name)
    mode = f"incremental from run {state.run_id or '(none)'}" if opts.incremental else "full"
    _progress(f"{broker_name}: {len(ga.nodes)} node(s), master {master}, {mode}")
    if not opts.incremental:
        state_in = inc.AuditState()
    else:
        state_in = state
    all_chunks = []
    for na in ga.nodes.values():
        mine = [c for c in na.chunks if _in_window(c, opts.since_ms, opts.until_ms)]
        if opts.incremental:
            mine = inc.chunks_to_check(mine, state_in.verified.get(na.node, -1))
        all_chunks += mine
    t0 = time.monotonic()
    issues_df, records = run_log_integrity(spark, opts.spec, all_chunks)
    issues = [r.asDict() for r in issues_df.collect()]
    _progress(f"{broker_name}: log integrity: {records} records, {len(issues)} issue(s)")
    slaves = {
        n: [c for c in na.chunks if _in_window(c, opts.since_ms, opts.until_ms)]
        for n, na in ga.nodes.items()
        if n != master
    }
    m_chunks = [c for c in ga.nodes[master].chunks if _in_window(c, opts.since_ms, opts.until_ms)]
    start_at = {
        f"{master}->{n}": min(state_in.verified.get(master, 0), state_in.verified.get(n, 0))
        for n in slaves
    }
    ranges = run_replica_consistency(
        spark,
        opts.spec,
        m_chunks,
        slaves,
        master,
        opts.max_lag_bytes,
        opts.window_bytes,
        start_at=start_at,
    )
    _progress(f"{broker_name}: replica consistency: {len(ranges)} range(s)")
    durability = acked_durability(
        ga, master, ranges, state_in.last_snapshot_at, tuple(state_in.max_ack)
    )
    snapshots = [s for na in ga.nodes.values() for s in na.snapshots]
    snapshots = [
        s for s in snapshots
        if (opts.since_ms is None or s.takenAt >= opts.since_ms)
        and (opts.until_ms is None or s.takenAt <= opts.until_ms)
        and s.takenAt > state_in.last_snapshot_at
    ]  # fmt: skip
    events = [e for na in ga.nodes.values() for e in na.events]
    seeds = inc.seed_snapshots(state_in, broker_name)
    timeline_df, violations_df = run_offset_monotonicity(spark, seeds + snapshots, events)
    timeline = [r.asDict() for r in timeline_df.collect()]
    violations = [r.asDict() for r in violations_df.collect()]
    _progress(f"{broker_name}: offsets: {len(timeline)} points, {len(violations)} violation(s)")
    counts: dict[str, int] = {}
    for r in ranges:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    rc_fail = [r for r in ranges if r["verdict"] in FAILING_RANGES or r.get("lag_exceeded")]
    checks = [
        {
            "name": "replica_consistency",
            "passed": not rc_fail,
            "findings": len(rc_fail),
            "detail": "single node: no replica to compare" if not slaves else "",
        },
        {"name": "acknowledged_durability", "passed": not durability, "findings": len(durability)},
        {
            "name": "log_integrity",
            "passed": not issues,
            "findings": len(issues),
            "detail": f"{records} records checked",
        },  # fmt: skip
        {"name": "offset_monotonicity", "passed": not violations, "findings": len(violations)},
    ]
    verdict = {
        "runId": run_id,
        "cluster": opts.cluster,
        "brokerName": broker_name,
        "master": master,
        "window": {"since": opts.since_ms, "until": opts.until_ms},
        "passed": all(c["passed"] for c in checks),
        "counts": counts,
        "checks": checks,
        "recordsChecked": records,
        "seconds": round(time.monotonic() - t0, 3),
        "findings": {
            "ranges": [r for r in ranges if r["verdict"] != "match"][:100],
            "records_issues": issues[:100],
            "acknowledged_durability": durability[:100],
            "offset_violations": violations[:100],
        },
    }
    prefix = f"{layout.audit_run_prefix(run_id)}{broker_name}/"
    _write_parquet(
        store, prefix + "ranges.parquet", ranges, ["pair", "start", "end", "verdict", "detail"]
    )
    _write_parquet(
        store, prefix + "records_issues.parquet", issues, ["node", "offset", "check", "detail"]
    )
    _write_parquet(store, prefix + "offset_timeline.parquet", timeline, None)
    _write_parquet(store, prefix + "offset_violations.parquet", violations, None)
    store.put_mutable(prefix + "verdict.json", json.dumps(verdict, indent=2, default=str).encode())
    if verdict["passed"]:
        promises = [
            (max([s.confirmOffset, *s.slaves.values()]), s.takenAt,
             f"{s.node}/snapshots/{s.takenAt:013d}.json")
            for s in snapshots if s.role != "SLAVE"
        ]  # fmt: skip
        new_state = inc.next_state(
            state_in if opts.incremental else state,
            run_id,
            {n: na.end for n, na in ga.nodes.items()},
            timeline,
            snapshots,
            max(promises) if promises else None,
        )
        inc.save_state(store, opts.cluster, broker_name, new_state)
    return verdict


def _write_parquet(store, key: str, rows: list[dict], columns: list[str] | None) -> None:
    import pandas as pd

    df = pd.DataFrame(rows, columns=columns) if columns else pd.DataFrame(rows)
    for col in ("lag_exceeded",):
        if col in df.columns:
            df = df.drop(columns=[col])
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    store.put_mutable(key, buf.getvalue())


def run_audit(spark, opts: AuditOptions) -> dict[str, Any]:
    _T0[0] = time.monotonic()
    store = opts.spec.open()
    run_id = (
        opts.run_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    )
    names = [opts.broker_name] if opts.broker_name else list_broker_names(store, opts.cluster)
    verdicts = [audit_group(spark, opts, store, n, run_id) for n in names]
    _progress(f"outputs written under audits/{run_id}/")
    if len(verdicts) == 1:
        summary = verdicts[0]
    else:
        summary = {
            "runId": run_id,
            "cluster": opts.cluster,
            "brokerName": None,
            "window": {"since": opts.since_ms, "until": opts.until_ms},
            "passed": all(v["passed"] for v in verdicts),
            "counts": {},
            "checks": [
                {
                    "name": f"{v['brokerName']}",
                    "passed": v["passed"],
                    "findings": sum(c["findings"] for c in v["checks"]),
                }
                for v in verdicts
            ],  # fmt: skip
            "groups": [v["brokerName"] for v in verdicts],
        }
        for v in verdicts:
            for k, n in v["counts"].items():
                summary["counts"][k] = summary["counts"].get(k, 0) + n
    store.put_mutable(
        layout.audit_run_prefix(run_id) + "verdict.json",
        json.dumps(summary, indent=2, default=str).encode(),
    )
    summary["groupVerdicts"] = verdicts
    return summary
