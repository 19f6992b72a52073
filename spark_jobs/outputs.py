"""The audit's outputs: check statuses from findings and evidence (the rules are
``contracts.audit_tables``'), ``verdict.json`` and the Parquet tables of one group."""

from __future__ import annotations

import io
import json
from typing import Any

from contracts import archive_layout as layout
from contracts import audit_tables as T

#: rows of each finding list copied into verdict.json (the tables hold them all)
VERDICT_FINDINGS_MAX = 100
#: divergences whose records are decoded side by side in verdict.json
WITNESSES_MAX = 50


def complete_range(r: dict) -> None:
    """Give a range row every ``ranges`` column: master, node, bytes, allowed, lag_exceeded,
    first_diff (from a divergent row's detail)."""
    r["master"], r["node"] = r["pair"].split("->", 1)
    r["bytes"] = r["end"] - r["start"]
    r["allowed"] = bool(r.get("allowed", False))
    r["lag_exceeded"] = bool(r.get("lag_exceeded", False))
    r["first_diff"] = None
    if r["verdict"] in (T.DIVERGENT, T.CONFLICT) and r.get("detail", "").startswith("{"):
        try:
            r["first_diff"] = json.loads(r["detail"])["firstDifferingOffset"]
        except (ValueError, KeyError):
            pass
    r.setdefault("detail", "")


def merge_faults(listed: list[dict], found: list[dict], windowed: dict) -> list[dict]:
    """Archive faults from the listing and from the executors' reads, one per (key, kind), the
    listing's first (it knew before reading); executor rows get their node from the chunk."""
    node_of = {c["key"]: n for n, cs in windowed.items() for c in cs}
    out: dict[tuple, dict] = {}
    seen_keys: set[str] = set()
    for f in listed + found:
        f = dict(f, node=f.get("node") or node_of.get(f["key"], ""))
        if f["kind"] in (T.FAULT_LOG_MISSING, T.FAULT_SIZE_MISMATCH) and f["key"] in seen_keys:
            continue  # the same absent or short object, seen again by a read
        seen_keys.add(f["key"])
        out.setdefault((f["key"], f["kind"]), f)
    return sorted(out.values(), key=lambda f: (f["node"], f["key"], f["kind"]))


#: cross-chunk queue gaps whose record is looked up on the driver (one read each)
GAPS_LOCATED_MAX = 50


def locate_gaps(store, issues: list[dict]) -> None:
    """A queue gap found between two chunks names the chunk, not the record: read that chunk
    (on the driver, a few at most) and name the first record of the queue in it, with its
    physical offset and msgId."""
    from contracts.errors import ArchiveError, CorruptRecordError
    from contracts.record.reader import scan_records

    todo = [i for i in issues if i["check"] == "queue_offset_gap" and i.get("msg_id") is None]
    for issue in todo[:GAPS_LOCATED_MAX]:
        try:
            data = store.get(issue["key"])
            for rec in scan_records(data, base_offset=issue["offset"], with_body=False):
                if not rec.is_blank and (rec.topic, rec.queue_id) == (
                    issue["topic"],
                    issue["queue_id"],
                ):
                    issue["offset"], issue["msg_id"] = rec.physical_offset, rec.msg_id
                    break
        except (ArchiveError, CorruptRecordError):
            continue  # the chunk's own findings say why; the row keeps the chunk's offset


def judge_checks(
    *,
    ga,
    state_in,
    incremental,
    rep,
    integrity,
    faults,
    durability,
    acks,
    points,
    violations,
    extra=(),
) -> list[T.CheckResult]:
    """Each check's status from its findings and its evidence (what it judged); ``extra``:
    checks judged elsewhere (the informational ``delivery``)."""
    verified_before = sum(state_in.verified.values()) if incremental else 0
    prior = " (and what earlier passing runs verified)" if verified_before else ""
    out = []
    objects = len(integrity.checked_keys) + ga.docs_read
    # an incremental run with nothing new stands on what earlier passing runs verified
    earlier = 1 if incremental and verified_before and not objects else 0
    out.append(
        _check(
            T.ARCHIVE_INTEGRITY,
            len(faults),
            objects + earlier,
            f"{len(integrity.checked_keys)} chunk(s) matched against their manifest's size "
            f"and sha256, {ga.docs_read} JSON document(s) read",
            "no archived object was read",
        )
    )
    out.append(_replica_check(rep, verified_before, prior))
    prior_ack = state_in.max_ack[0] if incremental else 0
    out.append(
        _check(
            T.ACKNOWLEDGED_DURABILITY,
            len(durability),
            acks + (1 if prior_ack else 0),
            f"{acks} acknowledgement(s) in master snapshots judged{prior}",
            "no master snapshot carries an acknowledged offset",
        )
    )
    out.append(
        _check(
            T.LOG_INTEGRITY,
            len(integrity.issues),
            integrity.records + (1 if verified_before and not integrity.records else 0),
            f"{integrity.records} record(s) checked{prior}",
            "no record was read",
        )
    )
    traffic = sum(c["records"] for na in ga.nodes.values() for c in na.chunks)
    prior_points = len(state_in.offsets) if incremental and not points else 0
    out.append(
        _check(
            T.OFFSET_MONOTONICITY,
            len(violations),
            points + prior_points,
            f"{points} committed offset point(s) of masters judged{prior}",
            "no committed consumer offset in any master snapshot"
            + (f" although the group stored {traffic} record(s)" if traffic else ""),
        )
    )
    out += list(extra)
    for c in out:
        c.counts = {"evidence": c.evidence}
    return out


def _replica_check(rep, verified_before: int, prior: str) -> T.CheckResult:
    """Replica consistency: no evidence with one node only (unless a range already fails)."""
    failing = [
        r for r in rep.ranges if T.range_fails(r["verdict"], r["allowed"], r["lag_exceeded"])
    ]
    if rep.nodes < 2:
        return T.CheckResult(
            T.REPLICA_CONSISTENCY,
            T.STATUS_NO_EVIDENCE if not failing else T.STATUS_FAIL,
            len(failing),
            0,
            "one node only: no replica to compare",
        )
    evidence = rep.compared_bytes + (verified_before if not rep.compared_bytes else 0)
    return _check(
        T.REPLICA_CONSISTENCY,
        len(failing),
        evidence,
        f"{rep.compared_bytes} byte(s) read on both sides and compared{prior}",
        "no byte range is held by both a master and a slave",
    )


def _check(name: str, findings: int, evidence: int, said: str, none: str) -> T.CheckResult:
    status = T.check_status(findings, evidence)
    reason = none if status == T.STATUS_NO_EVIDENCE else said
    if findings:
        reason = f"{findings} finding(s); {said}"
    return T.CheckResult(name, status, findings, evidence, reason)


def check_row(c: T.CheckResult) -> dict:
    return {
        "check": c.check,
        "status": c.status,
        "findings": c.findings,
        "evidence": c.evidence,
        "reason": c.reason,
    }


def _witnesses(store, ranges: list[dict], windowed: dict) -> list[dict]:
    """The records at the first differing offset of each divergent range, side by side."""
    from spark_jobs.replica_consistency import record_at
    from spark_jobs.views import node_view

    out = []
    views = {}
    for r in ranges:
        if r["verdict"] not in (T.DIVERGENT, T.CONFLICT) or r["first_diff"] is None:
            continue
        if len(out) >= WITNESSES_MAX:
            break
        detail = json.loads(r["detail"])
        for side in (r["master"], r["node"]):
            if side not in views:
                views[side] = node_view(windowed.get(side, []))
        out.append(
            {
                "pair": r["pair"],
                "first_diff": r["first_diff"],
                "master_record": detail.get("master")
                or record_at(store, views[r["master"]], r["first_diff"]),
                "node_record": detail.get("slave")
                or record_at(store, views[r["node"]], r["first_diff"]),
                # spark_jobs/witness.py: both replicas' bytes around the first difference
                "window": detail.get("window"),
                "differing_bytes": detail.get("differingBytes"),
            }
        )
        out[-1]["master_key"] = out[-1]["master_record"].get("key")
        out[-1]["node_key"] = out[-1]["node_record"].get("key")
    return out


def verdict_doc(
    opts,
    run_id,
    broker_name,
    master,
    checks,
    ranges,
    integrity,
    faults,
    durability,
    violations,
    store,
    windowed,
) -> dict[str, Any]:
    status = T.run_status([c.status for c in checks])
    counts: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    for r in ranges:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        nbytes[r["verdict"]] = nbytes.get(r["verdict"], 0) + r["bytes"]
    shown = [{k: v for k, v in r.items() if k not in ("ack", "ack_snapshot")} for r in ranges]
    return {
        "runId": run_id,
        "cluster": opts.cluster,
        "brokerName": broker_name,
        "master": master,
        "window": {"since": opts.since_ms, "until": opts.until_ms},
        "status": status,
        "passed": T.run_passed(status, opts.require_evidence),
        "requireEvidence": opts.require_evidence,
        "counts": counts,
        "bytes": nbytes,
        "checks": [c.to_json() for c in checks],
        "recordsChecked": integrity.records,
        "findings": {
            "ranges": [r for r in shown if r["verdict"] != T.MATCH][:VERDICT_FINDINGS_MAX],
            "records_issues": integrity.issues[:VERDICT_FINDINGS_MAX],
            "archive_faults": faults[:VERDICT_FINDINGS_MAX],
            "acknowledged_durability": durability[:VERDICT_FINDINGS_MAX],
            "offset_violations": violations[:VERDICT_FINDINGS_MAX],
        },
        "witnesses": {"divergent": _witnesses(store, ranges, windowed)},
    }


def table_bytes(table: str, rows) -> bytes:
    """Parquet bytes of ``rows`` (dicts, or an Arrow table) with exactly the table's columns
    (contracts.audit_tables)."""
    import pandas as pd

    cols = T.TABLE_COLUMNS[table]
    if not isinstance(rows, list):  # an Arrow table (the offset timeline): no row objects
        return _arrow_table_bytes(rows, cols)
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=list(cols))
    for c, dtype in cols.items():
        if dtype in ("int64", "float64", "bool") or len(df) == 0:
            df[c] = df[c].astype(dtype)
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


_ARROW_TYPES = {"int64": "int64", "float64": "float64", "bool": "bool_", "object": "string"}


def _arrow_table_bytes(rows, cols: dict) -> bytes:
    """Parquet of an Arrow table with the table's columns, typed as the dict path writes them
    (a test reads both back and compares)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {c: getattr(pa, _ARROW_TYPES[d])() for c, d in cols.items()}
    present = set(rows.column_names)
    arrays = [
        rows[c].cast(types[c]) if c in present else pa.nulls(rows.num_rows, types[c]) for c in cols
    ]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, names=list(cols)), buf)
    return buf.getvalue()


def write_group(store, run_id, broker_name, verdict, *, single_group: bool, tables: dict) -> None:
    """Every table and verdict.json of one group; for a one-group run the verdict is the run's."""
    from spark_jobs.archive_reader import io_pool

    prefix = layout.audit_group_prefix(run_id, broker_name)
    body = json.dumps(verdict, indent=2, default=str).encode()
    pool = io_pool()  # independent small PUTs
    done = [
        pool.submit(
            store.put_mutable,
            layout.audit_table_key(run_id, broker_name, name),
            table_bytes(name, rows),
        )
        for name, rows in tables.items()
    ]
    done.append(pool.submit(store.put_mutable, prefix + layout.VERDICT_NAME, body))
    if single_group:
        done.append(pool.submit(store.put_mutable, layout.audit_verdict_key(run_id), body))
    for f in done:
        f.result()


def run_summary(store, opts, run_id: str, verdicts: list[dict]) -> dict[str, Any]:
    """The run's verdict: the group's own for a one-group run, else a cluster summary (written
    to ``audits/{runId}/verdict.json``)."""
    if len(verdicts) == 1:
        if not opts.broker_name:  # (a --broker-name run wrote it with the group's outputs)
            store.put_mutable(
                layout.audit_verdict_key(run_id),
                json.dumps(verdicts[0], indent=2, default=str).encode(),
            )
        return dict(verdicts[0])
    status = T.combine_runs([v["status"] for v in verdicts])
    summary = {
        "runId": run_id,
        "cluster": opts.cluster,
        "brokerName": None if len(verdicts) != 1 else verdicts[0]["brokerName"],
        "window": {"since": opts.since_ms, "until": opts.until_ms},
        "status": status,
        "passed": all(v["passed"] for v in verdicts),
        "requireEvidence": opts.require_evidence,
        "counts": {},
        "checks": [
            {
                "name": v["brokerName"],
                "status": v["status"],
                "passed": v["passed"],
                "findings": sum(c["findings"] for c in v["checks"]),
            }
            for v in verdicts
        ],
        "groups": [v["brokerName"] for v in verdicts],
    }
    for v in verdicts:
        for k, n in v["counts"].items():
            summary["counts"][k] = summary["counts"].get(k, 0) + n
    store.put_mutable(
        layout.audit_verdict_key(run_id), json.dumps(summary, indent=2, default=str).encode()
    )
    return summary
