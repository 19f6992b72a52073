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

import dataclasses
import io
import json
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from broker.archive import layout
from broker.archive.object_store import StoreSpec
from broker.archive.retention import read_horizon
from broker.errors import AuditInputError
from spark_jobs import incremental as inc
from spark_jobs.archive_reader import (
    GroupArchive,
    executor_store,
    io_pool,
    list_broker_names,
    load_group,
)
from spark_jobs.expiry import apply_horizon, mark_expired
from spark_jobs.log_integrity import judge, run_log_integrity
from spark_jobs.offset_monotonicity import run_offset_monotonicity, timeline_rows
from spark_jobs.replica_consistency import (
    clip,
    epoch_plans,
    node_view,
    run_replica_consistency,
)

FAILING_RANGES = ("divergent", "missing", "extra", "conflict")
_NOT_LOST = ("match", "expired")  # ranges below an ack that are no loss (expired: pruned)
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
    # byte windows of the replica comparison: as large as the shipper's default chunk, so a
    # window is read with whole-object requests where the chunks line up
    window_bytes: int = 64 * 1024 * 1024
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
    if ga.master_hint:  # an incremental run that listed nothing new naming one
        return ga.master_hint
    raise AuditInputError(f"{ga.cluster}/{ga.broker_name}: cannot tell which node is the master")


def epoch_masters(ga: GroupArchive) -> list[tuple[int, int, str]]:
    """``[(epoch, start offset, master node)]``: who was master in each epoch and where the
    epoch's bytes begin. The master of an epoch comes from its non-SLAVE chunk manifests,
    snapshots and ``role_changed`` events; an epoch begins at the first byte its master archived
    under it, or at the truncation point a ``truncated`` event of that epoch names (the old
    master's cut is where the new master's log went its own way). Epochs without a known master
    or without bytes are left out; with no epochs at all the final master owns everything."""
    masters: dict[int, str] = {}
    first_byte: dict[int, int] = {}
    for na in ga.nodes.values():
        for c in na.chunks:
            if c["role"] != "SLAVE":
                masters.setdefault(c["epoch"], na.node)
    for na in ga.nodes.values():
        for snap in na.snapshots:
            if snap.role != "SLAVE":
                masters.setdefault(snap.epoch, na.node)
        for ev in na.events:
            if ev["kind"] == "role_changed" and ev.get("to") not in (None, "SLAVE"):
                masters.setdefault(int(ev["epoch"]), na.node)
    for na in ga.nodes.values():
        for c in na.chunks:
            if masters.get(c["epoch"]) == na.node:
                first_byte[c["epoch"]] = min(first_byte.get(c["epoch"], c["start"]), c["start"])
        for ev in na.events:
            if ev["kind"] == "truncated" and int(ev["epoch"]) in masters:
                e = int(ev["epoch"])
                first_byte[e] = min(first_byte.get(e, ev["to"]), ev["to"])
    out: list[tuple[int, int, str]] = []
    for e in sorted(first_byte):
        start = first_byte[e] if out else 0
        if out and start <= out[-1][1]:
            start = out[-1][1]
            if masters[e] != out[-1][2]:
                out[-1] = (e, start, masters[e])  # the earlier epoch left no bytes of its own
                continue
        out.append((e, start, masters[e]))
    if not out:
        out = [(0, 0, pick_master(ga))]
    return out


def old_master_tails(ga, epochs, chunks: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Per node, the bytes it wrote as master of an earlier epoch that lie in a later epoch's
    range of another master: its unreplicated tail, cut off by the failover (``extra``)."""
    tails: dict[str, list[dict]] = {}
    for node, cs in chunks.items():
        for c in cs:
            if c["role"] == "SLAVE":
                continue
            for i, (e, lo, m) in enumerate(epochs):
                if e <= c["epoch"] or m == node:
                    continue
                hi = epochs[i + 1][1] if i + 1 < len(epochs) else None
                for seg in clip([{**c, "kstart": c["start"]}], lo, hi):
                    seg.update(epoch=c["epoch"], new_epoch=e, new_master=m)
                    tails.setdefault(node, []).append(seg)
    return tails


def conflict_plans(chunks: dict[str, list[dict]]) -> list[tuple[str, list, list]]:
    """Chunks of one node and one epoch that overlap must hold the same bytes there: each
    overlap is compared like a replica pair ``node->node`` (see :func:`judge_conflicts`)."""
    plans = []
    for node, cs in sorted(chunks.items()):
        cs = sorted(cs, key=lambda c: c["start"])
        for i, a in enumerate(cs):
            for j in range(i + 1, len(cs)):  # (no slice: a copy per chunk is quadratic too)
                b = cs[j]
                if b["start"] >= a["end"]:
                    break  # sorted by start: no later chunk overlaps ``a`` either
                lo, hi = max(a["start"], b["start"]), min(a["end"], b["end"])
                if a["epoch"] != b["epoch"] or lo >= hi:
                    continue
                seg = [
                    {"start": lo, "end": hi, "key": c["key"], "kstart": c["start"]} for c in (a, b)
                ]
                plans.append((f"{node}->{node}", [seg[0]], [seg[1]]))
    return plans


def judge_conflicts(ranges: list[dict]) -> list[dict]:
    """Rows of the ``node->node`` overlap comparisons: equal bytes are no news and are dropped;
    different bytes are an archive ``conflict`` (DESIGN.md section 3) naming both chunks."""
    out = []
    for r in ranges:
        a, b = r["pair"].split("->", 1)
        if a != b:
            out.append(r)
        elif r["verdict"] != "match":
            out.append(
                {**r, "verdict": "conflict" if r["verdict"] == "divergent" else r["verdict"]}
            )
    return out


def tail_ranges(ga, tails: dict[str, list[dict]], start_at: dict[str, int]) -> list[dict]:
    """``extra`` rows for old masters' tails: allowed unless that master had acknowledged them."""
    rows = []
    for node, segs in tails.items():
        promised = [
            (max([s.confirmOffset, *s.slaves.values()]), s)
            for s in ga.nodes[node].snapshots
            if s.role != "SLAVE"
        ]
        for seg in sorted(segs, key=lambda t: t["start"]):
            pair = f"{seg['new_master']}->{node}"
            if seg["end"] <= start_at.get(pair, 0):
                continue
            acked = [(a, s) for a, s in promised if s.epoch == seg["epoch"] and a > seg["start"]]
            detail = (
                f"unreplicated tail of {node}, master in epoch {seg['epoch']}; "
                f"epoch {seg['new_epoch']} belongs to {seg['new_master']}"
            )
            row = {"pair": pair, "start": seg["start"], "end": seg["end"], "verdict": "extra"}
            if acked:
                a, s = max(acked, key=lambda x: x[0])
                row["detail"] = (
                    f"{detail}; acknowledged up to {a} by {node}/snapshots/{s.takenAt:013d}.json"
                )
                row["acked_tail"] = True
            else:
                row["detail"] = detail + "; not acknowledged (allowed)"
                row["allowed"] = True
            last = rows[-1] if rows else None
            if last and (last["pair"], last["end"], last["detail"]) == (
                row["pair"], row["start"], row["detail"]
            ):  # fmt: skip
                last["end"] = row["end"]  # chunk boundaries do not matter
            else:
                rows.append(row)
    return rows


def matched_by_identity(ranges: list[dict], views: dict[str, list[dict]]) -> dict[tuple, list]:
    """Per (node, chunk key), the (start, end, key) pieces its comparison read and found equal
    to the master's bytes."""
    out: dict[tuple, list] = {}
    for r in ranges:
        master, node = r["pair"].split("->", 1)
        if r["verdict"] != "match" or master == node:
            continue
        for seg in views.get(node, []):
            lo, hi = max(seg["start"], r["start"]), min(seg["end"], r["end"])
            if lo < hi:
                out.setdefault((node, seg["key"]), []).append((lo, hi, seg["key"]))
    return out


def _identical(chunk: dict, matched: dict[tuple, list]) -> bool:
    pieces = sorted(matched.get((chunk["node"], chunk["key"]), []))
    pos = chunk["start"]
    for lo, hi, _key in pieces:
        if lo > pos:
            break
        pos = max(pos, hi)
    return pos >= chunk["end"]


def mirrored_issues(issues: list[dict], identical: list[dict], ranges: list[dict]) -> list[dict]:
    """A record issue of a master inside bytes a slave holds identically is the slave's too."""
    out = []
    for c in identical:
        for r in ranges:
            master, node = r["pair"].split("->", 1)
            if node != c["node"] or r["verdict"] != "match":
                continue
            for i in issues:
                if i["node"] == master and max(r["start"], c["start"]) <= i["offset"] < min(
                    r["end"], c["end"]
                ):
                    out.append({**i, "node": node})
    return out


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
                            "snapshot": f"{na.node}/snapshots/{snap.takenAt:013d}.json",
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
        ack = int(r["detail"].split("acknowledged up to ")[1].split()[0])
        findings.append(
            {
                "kind": "acknowledged_not_on_new_master",
                "slave": r["pair"].split("->", 1)[0],
                "lost_start": r["start"],
                "lost_end": min(r["end"], ack),
                "verdict": "extra",
                "snapshot": r["detail"].rsplit(" by ", 1)[1],
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
                snap_key = f"{na.node}/snapshots/{snap.takenAt:013d}.json"
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


def audit_group(spark, opts: AuditOptions, store, broker_name: str, run_id: str) -> dict:
    # the state's read overlaps the listing
    state_f = io_pool().submit(inc.load_state, store, opts.cluster, broker_name)
    ga = load_group(
        store,
        opts.cluster,
        broker_name,
        marks=(lambda: state_f.result().marks()) if opts.incremental else None,
    )
    state = state_f.result()
    ga.master_hint = state.master if opts.incremental else ""
    horizon = read_horizon(store, opts.cluster, broker_name)
    apply_horizon(ga, horizon)
    master = pick_master(ga)
    mode = f"incremental from run {state.run_id or '(none)'}" if opts.incremental else "full"
    _progress(f"{broker_name}: {len(ga.nodes)} node(s), master {master}, {mode}")
    if not opts.incremental:
        state_in = inc.AuditState()
    else:
        state_in = state
    windowed = {
        n: [c for c in na.chunks if _in_window(c, opts.since_ms, opts.until_ms)]
        for n, na in ga.nodes.items()
    }
    slaves = [n for n in ga.nodes if n != master]
    epochs = epoch_masters(ga)
    views = {n: node_view(cs) for n, cs in windowed.items()}
    tails = old_master_tails(ga, epochs, windowed)
    plans = epoch_plans(views, epochs, {n: [t for t in ts] for n, ts in tails.items()})
    plans += conflict_plans(windowed)
    start_at = {}
    for pair, _m, _s in plans:
        a, b = pair.split("->", 1)
        start_at[pair] = min(state_in.verified.get(a, 0), state_in.verified.get(b, 0))
    all_chunks = []
    for na in ga.nodes.values():
        mine = windowed[na.node]
        if opts.incremental:
            mine = inc.chunks_to_check(mine, state_in.verified.get(na.node, -1))
        all_chunks += mine
    t_scan = time.monotonic()
    scan = run_replica_consistency(
        spark,
        opts.spec,
        plans,
        opts.max_lag_bytes,
        opts.window_bytes,
        start_at=start_at,
        check_chunks=all_chunks,
    )
    scan_s = time.monotonic() - t_scan
    ranges = judge_conflicts(scan.ranges) + tail_ranges(ga, tails, start_at)
    ranges = mark_expired(ranges, horizon, start_at)
    _progress(
        f"{broker_name}: replica consistency: {len(ranges)} range(s); "
        f"{len(scan.checked_keys)} master chunk(s) checked on the same reads"
    )
    t0 = time.monotonic()
    # a chunk whose bytes all matched its epoch's master was verified by identity: its records
    # are the master's, checked once; the chunks checked with the comparison are not read again;
    # only the others are read by the log integrity job
    matched = matched_by_identity(ranges, views)
    checked = [c for c in all_chunks if c["key"] in scan.checked_keys]
    rest = [c for c in all_chunks if c["key"] not in scan.checked_keys]
    identical = [c for c in rest if _identical(c, matched)]
    to_read = [c for c in rest if not _identical(c, matched)]
    t_li = time.monotonic()
    li_rows = run_log_integrity(spark, opts.spec, to_read)
    li_s = time.monotonic() - t_li
    integrity = judge(scan.check_rows + li_rows, checked + to_read)
    issues = integrity.issues
    issues += mirrored_issues(issues, identical, ranges)
    by_identity = sum(c["records"] for c in identical)
    records = integrity.records + by_identity
    _progress(
        f"{broker_name}: log integrity: {records} records ({by_identity} by identity with "
        f"their master's bytes), {len(issues)} issue(s)"
    )
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
    if snapshots and timeline_rows(seeds + snapshots):  # (seeds alone were judged before)
        timeline_df, violations_df = run_offset_monotonicity(spark, seeds + snapshots, events)
        timeline = [r.asDict() for r in timeline_df.collect()]
        violations = [r.asDict() for r in violations_df.collect()]
    else:  # no committed offset in the window: nothing to order, no Spark job
        timeline, violations = [], []
    _progress(f"{broker_name}: offsets: {len(timeline)} points, {len(violations)} violation(s)")
    counts: dict[str, int] = {}
    for r in ranges:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    rc_fail = [
        r
        for r in ranges
        if (r["verdict"] in FAILING_RANGES and not r.get("allowed")) or r.get("lag_exceeded")
    ]
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
            "detail": f"{records} records checked ({by_identity} by identity)",
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
        "recordsByIdentity": by_identity,
        # where the time went (bench audit): the comparison job (with the master chunks checked
        # on its reads), the log integrity job, and the seconds inside the record checks
        "timing": {
            "scanJobS": round(scan_s, 3),
            "scanReadS": round(scan.read_s, 3),
            "scanCompareS": round(scan.compare_s, 3),
            "logIntegrityJobS": round(li_s, 3),
            "recordsDecoded": integrity.records,
            "recordCheckS": round(integrity.check_s, 3),
            "recordCheckCpuS": round(integrity.check_cpu_s, 3),
        },
        "seconds": round(time.monotonic() - t0, 3),
        "findings": {
            "ranges": [r for r in ranges if r["verdict"] != "match"][:100],
            "records_issues": issues[:100],
            "acknowledged_durability": durability[:100],
            "offset_violations": violations[:100],
        },
    }
    prefix = f"{layout.audit_run_prefix(run_id)}{broker_name}/"
    tables = [
        ("ranges.parquet", ranges, ["pair", "start", "end", "verdict", "detail"]),
        ("records_issues.parquet", issues, ["node", "offset", "check", "detail"]),
        ("offset_timeline.parquet", timeline, None),
        ("offset_violations.parquet", violations, None),
    ]
    verdict_json = json.dumps(verdict, indent=2, default=str).encode()
    pool = io_pool()  # independent small PUTs
    done = [pool.submit(_write_parquet, store, prefix + n, r, c) for n, r, c in tables]
    done.append(pool.submit(store.put_mutable, prefix + "verdict.json", verdict_json))
    if opts.broker_name:  # a one-group run: the run's verdict is this group's
        run_key = layout.audit_run_prefix(run_id) + "verdict.json"
        done.append(pool.submit(store.put_mutable, run_key, verdict_json))
    for f in done:
        f.result()
    # the watermarks move only after every output of a passing run is written
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
            ga=ga,
            master=master,
        )
        if opts.incremental and new_state == dataclasses.replace(state_in, run_id=run_id):
            # nothing new was verified: the watermarks stay those of the run that verified them
            _progress(f"{broker_name}: state unchanged (still as of run {state_in.run_id})")
        else:
            inc.save_state(store, opts.cluster, broker_name, new_state)
    return verdict


def _write_parquet(store, key: str, rows: list[dict], columns: list[str] | None) -> None:
    import pandas as pd

    df = pd.DataFrame(rows, columns=columns) if columns else pd.DataFrame(rows)
    for col in ("lag_exceeded", "allowed", "acked_tail"):
        if col in df.columns:
            df = df.drop(columns=[col])
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    store.put_mutable(key, buf.getvalue())


def run_audit(spark, opts: AuditOptions) -> dict[str, Any]:
    _T0[0] = time.monotonic()
    # executors (on a cluster: other machines) get the driver's S3 settings inside the tasks
    opts = dataclasses.replace(opts, spec=opts.spec.resolved())
    # the store (an S3 client costs ~0.15 s to make) is opened once per process and reused by
    # later runs, like the executors' (objects are never cached, only the client)
    store = executor_store(opts.spec)
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
    if not opts.broker_name:  # (a one-group run wrote it with the group's outputs)
        store.put_mutable(
            layout.audit_run_prefix(run_id) + "verdict.json",
            json.dumps(summary, indent=2, default=str).encode(),
        )
    summary["groupVerdicts"] = verdicts
    return summary
