"""Run the audit checks over one broker group (or every group of a cluster) and write the outputs.

Outputs under ``ROOT/audits/{runId}/{brokerName}/``: one Parquet file per table of
``contracts.audit_tables.TABLE_COLUMNS`` and ``verdict.json``; ``ROOT/audits/{runId}/verdict.json``
is the run's verdict (the group's own when the run covers one group, else a cluster summary).

What fails a check, and when a check has no evidence, is decided by ``contracts.audit_tables``;
this module gathers the findings and the evidence:

- archive integrity: every chunk's object present, of its manifest's size and sha256 (checked on
  the read that checks its records), every manifest, snapshot and event readable JSON;
- replica consistency: the ranges of ``replica_consistency`` per (epoch master, node) pair;
- acknowledged durability: ``acked_durability``;
- log integrity: ``log_integrity`` over every chunk's own bytes;
- offset monotonicity: ``offset_monotonicity`` over the master snapshots.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contracts import audit_tables as T
from contracts.object_store import StoreSpec
from contracts.retention import read_horizon
from spark_jobs import incremental as inc
from spark_jobs import outputs, progress
from spark_jobs.acked_durability import acked_durability, promises
from spark_jobs.archive_reader import (
    GroupArchive,
    executor_store,
    io_pool,
    list_broker_names,
    load_group,
)
from spark_jobs.commit_history import judge_offsets, ordered_records
from spark_jobs.delivery import delivery_check, delivery_doc, duplicates
from spark_jobs.elections import judge_elections
from spark_jobs.epochs import (
    conflict_plans,
    epoch_masters,
    judge_conflicts,
    old_master_tails,
    pick_master,
    tail_ranges,
)
from spark_jobs.expiry import apply_horizon, mark_expired
from spark_jobs.log_damage import damage_issues
from spark_jobs.log_integrity import ScanTally, judge, run_log_integrity
from spark_jobs.offset_monotonicity import (
    empty_timeline,
    has_points,
    lost_at_failover,
    master_points,
    run_offset_monotonicity,
    timeline_last_rows,
)
from spark_jobs.redelivery import redeliveries
from spark_jobs.replica_consistency import run_replica_consistency
from spark_jobs.views import epoch_plans, node_view

DEFAULT_MAX_LAG_BYTES = T.DEFAULT_MAX_LAG_BYTES


@dataclass
class AuditOptions:
    spec: StoreSpec
    cluster: str
    broker_name: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    run_id: str | None = None
    max_lag_bytes: int = T.DEFAULT_MAX_LAG_BYTES
    # byte windows of the replica comparison: as large as the shipper's default chunk, so a
    # window is read with whole-object requests where the chunks line up
    window_bytes: int = 64 * 1024 * 1024
    incremental: bool = False
    #: a check with nothing to judge (no_evidence) fails the run
    require_evidence: bool = False
    #: the informational ``delivery`` check fails past these (None: it only counts)
    max_duplicated: int | None = None
    max_redelivered: int | None = None
    #: called with a group's name just before its state is written (the lease's check,
    #: ``spark_jobs/lease.py``): raising keeps the state untouched
    before_save: Callable[[str], None] | None = None
    #: the cluster's groups when the caller listed them already (its leases): not listed again
    broker_names: tuple[str, ...] = ()


def _progress(msg: str) -> None:
    progress.line(msg)


def _in_window(c: dict, since: int | None, until: int | None) -> bool:
    if since is not None and c["lastStoreTs"] and c["lastStoreTs"] < since:
        return False
    if until is not None and c["firstStoreTs"] and c["firstStoreTs"] > until:
        return False
    return True


@dataclass
class ReplicaResult:
    ranges: list[dict]
    scan: Any  # replica_consistency.ScanResult
    nodes: int
    compared_bytes: int


def replica_step(
    spark, opts: AuditOptions, ga: GroupArchive, windowed, state_in, horizon
) -> ReplicaResult:
    """Check 1: ranges per (epoch master, node) pair, conflicts inside a node's archive, old
    masters' tails; the master chunks that a comparison window covers exactly are checked
    (sha256, records) in the same tasks."""
    epochs = epoch_masters(ga)
    views = {n: node_view(cs) for n, cs in windowed.items()}
    tails = old_master_tails(ga, epochs, windowed)
    plans = epoch_plans(views, epochs, tails) if epochs else []
    plans += conflict_plans(windowed)
    start_at = {}
    for pair, _m, _s in plans:
        a, b = pair.split("->", 1)
        start_at[pair] = min(state_in.verified.get(a, 0), state_in.verified.get(b, 0))
    to_check = [c for c in new_chunks(opts, windowed, state_in) if not c.get("absent")]
    scan = run_replica_consistency(
        spark,
        opts.spec,
        plans,
        opts.max_lag_bytes,
        opts.window_bytes,
        start_at=start_at,
        check_chunks=to_check,
    )
    ranges = judge_conflicts(scan.ranges) + tail_ranges(ga, tails, start_at)
    ranges = mark_expired(ranges, horizon, start_at)  # pruned history: expired, not missing
    for r in ranges:
        outputs.complete_range(r)
    compared = sum(r["bytes"] for r in ranges if r["verdict"] in (T.MATCH, T.DIVERGENT))
    return ReplicaResult(ranges, scan, len(ga.nodes), compared)


def new_chunks(opts: AuditOptions, windowed: dict[str, list[dict]], state_in) -> list[dict]:
    """The chunks this run checks: all in the window, or in an incremental run those beyond each
    node's verified watermark (plus the last verified one, see ``incremental``)."""
    out = []
    for node, cs in windowed.items():
        out += inc.chunks_to_check(cs, state_in.verified.get(node, -1)) if opts.incremental else cs
    return out


def _chunks_of(ga: GroupArchive, opts: AuditOptions, state_in) -> dict[str, list[dict]]:
    out = {}
    for n, na in ga.nodes.items():
        mine = [dict(c, node=n) for c in na.chunks if _in_window(c, opts.since_ms, opts.until_ms)]
        out[n] = mine
    return out


def integrity_step(spark, opts, windowed, rep, state_in, ga):
    """Check 3 (and the sha256 half of archive integrity): every chunk not already checked in a
    comparison task is read whole, once, by the log integrity job; the nodes' recorded damage."""
    scan, damaged = rep.scan, damage_issues(ga, rep.ranges)
    chunks = new_chunks(opts, windowed, state_in)
    readable = [c for c in chunks if not c.get("absent")]
    checked = [c for c in readable if c["key"] in scan.checked_keys]
    rest = [c for c in readable if c["key"] not in scan.checked_keys]
    tally = ScanTally(messages=list(scan.messages)).add(scan.check_rows)
    return judge(run_log_integrity(spark, opts.spec, rest, tally), checked + rest, damaged)


def offsets_step(spark, opts, ga: GroupArchive, state_in, broker_name):
    """Check 4: the committed offsets of master snapshots in the window, seeded with the points
    an earlier passing run recorded."""
    snapshots = [s for na in ga.nodes.values() for s in na.snapshots]
    snapshots = [
        s
        for s in snapshots
        if (opts.since_ms is None or s.takenAt >= opts.since_ms)
        and (opts.until_ms is None or s.takenAt <= opts.until_ms)
        and s.takenAt > state_in.last_snapshot_at
    ]
    events = [e for na in ga.nodes.values() for e in na.events]
    seeds = inc.seed_snapshots(state_in, broker_name)
    if snapshots and has_points(seeds + snapshots):  # (seeds alone were judged before)
        timeline_df, violations_df = run_offset_monotonicity(spark, seeds + snapshots, events)
        # columnar (a year's timeline is millions of rows), in the DataFrame's order
        timeline = timeline_df.toArrow()
        violations = [r.asDict() for r in violations_df.collect()]
        violations += lost_at_failover(seeds, snapshots, events)
    else:  # no committed offset in the window: nothing to order, no Spark job
        timeline, violations = empty_timeline(), []
    return snapshots, timeline, violations


@dataclass
class RecordFindings:
    """What the offset commit records and the stored messages showed beyond check 4's rows:
    verdict.json's ``offsets`` (coverage per consumer group) and ``delivery``, and the
    ``delivery`` check."""

    docs: dict[str, dict]
    checks: list[T.CheckResult]
    commits: dict[str, dict]  # each queue's newest commit record judged (the audit state's)


def records_step(
    spark, opts, ga, state_in, windowed, snapshots, timeline, snap_violations, integ, lost
):
    """Check 4 over the offset commit records the chunk tasks found (``commit_history``) and
    the ``delivery`` accounting: what ``offsets_step`` gave, with the violations of both, the
    points judged and the :class:`RecordFindings`."""
    events = [e for na in ga.nodes.values() for e in na.events]
    seed = inc.commit_seed(state_in)
    violations, history, offsets_doc = judge_offsets(
        integ.commits, windowed, snapshots, events, snap_violations, seed
    )
    points = history.records + master_points(timeline)
    _progress(f"{ga.broker_name}: offsets: {points} point(s), {len(violations)} violation(s)")
    chunks = [c for cs in windowed.values() for c in cs]
    masters = [c for c in chunks if c["key"] in integ.checked_keys and c["role"] != "SLAVE"]
    dups = duplicates(spark, opts.spec, integ.messages, masters)
    starts = {e: start for e, start, _node in epoch_masters(ga)}
    roles = {c["key"]: c["role"] for c in chunks}
    again = redeliveries(ordered_records(integ.commits, roles), starts)
    doc = delivery_doc(dups, again, len(lost))
    check = delivery_check(doc, opts.max_duplicated, opts.max_redelivered)
    last = inc.commit_points(history.last)
    found = RecordFindings({"offsets": offsets_doc, "delivery": doc}, [check], last)
    return snapshots, timeline, violations, points, found


def audit_group(spark, opts: AuditOptions, store, broker_name: str, run_id: str) -> dict:
    ga, state, horizon = _load(store, opts, broker_name)
    state_in = state if opts.incremental else inc.AuditState()
    master = pick_master(ga)
    mode = f"incremental from run {state.run_id or '(none)'}" if opts.incremental else "full"
    _progress(f"{broker_name}: {len(ga.nodes)} node(s), master {master or '(unknown)'}, {mode}")
    windowed = _chunks_of(ga, opts, state_in)
    t0 = time.monotonic()
    rep = replica_step(spark, opts, ga, windowed, state_in, horizon)
    scan_s = time.monotonic() - t0
    _progress(f"{broker_name}: replica consistency: {len(rep.ranges)} range(s)")
    t_li = time.monotonic()
    integrity = integrity_step(spark, opts, windowed, rep, state_in, ga)
    li_s = time.monotonic() - t_li
    _progress(
        f"{broker_name}: log integrity: {integrity.records} records, "
        f"{len(integrity.issues)} issue(s)"
    )
    outputs.locate_gaps(store, integrity.issues)
    elections = judge_elections(store, ga)  # controller mode: its records, every election
    faults = outputs.merge_faults(ga.faults + elections.faults, integrity.faults, windowed)
    durability = (
        acked_durability(ga, master, rep.ranges, state_in.last_snapshot_at, tuple(state_in.max_ack))
        + elections.losses
    )
    off = offsets_step(spark, opts, ga, state_in, broker_name) + (integrity, durability)
    snapshots, timeline, violations, points, found = records_step(
        spark, opts, ga, state_in, windowed, *off
    )
    checks = outputs.judge_checks(
        ga=ga,
        state_in=state_in,
        incremental=opts.incremental,
        rep=rep,
        integrity=integrity,
        faults=faults,
        durability=durability,
        acks=promises(ga, state_in.last_snapshot_at) + elections.judged,
        points=points,
        violations=violations,
        extra=found.checks,
    )
    verdict = outputs.verdict_doc(
        opts,
        run_id,
        broker_name,
        master,
        checks,
        rep.ranges,
        integrity,
        faults,
        durability,
        violations,
        store,
        windowed,
    )
    verdict.update(seconds=round(time.monotonic() - t0, 3), elections=elections.timeline)
    verdict.update(found.docs)  # offsets, delivery
    verdict["recordsByIdentity"] = 0  # every chunk's records are checked on its own bytes
    # where the time went (bench audit): the comparison job (with the master chunks checked on
    # its reads), the log integrity job, and the seconds inside the record checks
    verdict["timing"] = _timing(scan_s, li_s, rep, integrity)
    outputs.write_group(
        store,
        run_id,
        broker_name,
        verdict,
        single_group=bool(opts.broker_name),
        tables=_tables(rep, integrity, faults, durability, timeline, violations, checks),
    )
    # the watermarks move only after every output of a run that failed no check is written
    if verdict["status"] != T.RUN_FAILED:
        seen = (timeline, snapshots, found.commits)
        _save_state(store, opts, broker_name, run_id, ga, state, state_in, seen, master)
    return verdict


def _load(store, opts: AuditOptions, broker_name: str):
    """The group's archive (its horizon applied), its stored audit state (read alongside) and
    that horizon."""
    state_f = io_pool().submit(inc.load_state, store, opts.cluster, broker_name)
    marks = (lambda: state_f.result().marks()) if opts.incremental else None
    ga = load_group(store, opts.cluster, broker_name, marks=marks)
    state = state_f.result()
    ga.master_hint = state.master if opts.incremental else ""
    horizon = read_horizon(store, opts.cluster, broker_name)
    apply_horizon(ga, horizon)
    return ga, state, horizon


def _tables(rep, integrity, faults, durability, timeline, violations, checks) -> dict:
    """The group's output tables by name."""
    return {
        "ranges": rep.ranges,
        "records_issues": integrity.issues,
        "archive_faults": faults,
        "acked_losses": durability,
        "offset_timeline": timeline,
        "offset_violations": violations,
        "checks": [outputs.check_row(c) for c in checks],
    }


def _timing(scan_s: float, li_s: float, rep, integrity) -> dict:
    return {
        "scanJobS": round(scan_s, 3),
        "logIntegrityJobS": round(li_s, 3),
        "recordsDecoded": integrity.records,
        "scanReadS": round(rep.scan.read_s, 3),
        "scanCompareS": round(rep.scan.compare_s, 3),
        "recordCheckS": round(integrity.check_s, 3),
        "recordCheckCpuS": round(integrity.check_cpu_s, 3),
    }


def _save_state(store, opts, broker_name, run_id, ga, state, state_in, seen, master):
    """``seen``: this run's offset timeline, snapshots and commit points."""
    timeline, snapshots, commits = seen
    if opts.before_save is not None:
        opts.before_save(broker_name)  # the lease is still this run's, or this raises
    promised = [
        (max([s.confirmOffset, *s.slaves.values()]), s.takenAt, ga.snapshot_name(s.node, s.takenAt))
        for s in snapshots
        if s.role != "SLAVE"
    ]
    new_state = inc.next_state(
        state_in if opts.incremental else state,
        run_id,
        {n: na.end for n, na in ga.nodes.items()},
        timeline_last_rows(timeline),
        snapshots,
        max(promised) if promised else None,
        ga=ga,
        master=master,
        commits=commits,
    )
    if opts.incremental and new_state == dataclasses.replace(state_in, run_id=run_id):
        # nothing new was verified: the watermarks stay those of the run that verified them
        _progress(f"{broker_name}: state unchanged (still as of run {state_in.run_id})")
    else:
        inc.save_state(store, opts.cluster, broker_name, new_state)


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def run_audit(spark, opts: AuditOptions) -> dict[str, Any]:
    progress.restart()
    # the store (an S3 client costs ~0.15 s to make) is opened once per process and reused by
    # later runs, like the executors' (objects are never cached, only the client)
    # executors (on a cluster: other machines) get the driver's S3 settings inside the tasks
    opts = dataclasses.replace(opts, spec=opts.spec.resolved())
    store = executor_store(opts.spec)
    run_id = opts.run_id or new_run_id()
    names = list(opts.broker_names) or (
        [opts.broker_name] if opts.broker_name else list_broker_names(store, opts.cluster)
    )
    verdicts = [audit_group(spark, opts, store, n, run_id) for n in names]
    _progress(f"outputs written under audits/{run_id}/")
    summary = outputs.run_summary(store, opts, run_id, verdicts)
    summary["groupVerdicts"] = verdicts
    return summary
