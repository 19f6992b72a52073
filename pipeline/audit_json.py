"""``haproof audit --json``: one document whatever the number of groups, versioned.

Shape (``docs/schemas/audit.schema.json`` is the JSON Schema, ``docs/json.md`` the prose)::

    {"schemaVersion": 1, "command": "audit", "runId", "cluster", "status", "passed",
     "groups": [{"name", "status", "passed", "master",
                 "checks": [{"name", "status", "passed", "findings", "evidence", "detail",
                             "first": {"offset", "node", "topic", "queue"} | null}],
                 "ranges": {verdict: {"count", "bytes", "differingBytes"?}},
                 "expectations": {"success", "failedSuites", "reportUrl"} | null,
                 "report": URL | null}]}

A new field is added without a version change; a field renamed, removed or retyped bumps
``schemaVersion``.
"""

from __future__ import annotations

import json
from typing import Any

from contracts import audit_tables as T

SCHEMA_VERSION = 1


def _num(v) -> int | None:
    try:
        return None if v is None or v != v else int(v)  # NaN from a float64 column
    except (TypeError, ValueError):
        return None


def first_finding(verdict: dict[str, Any], check: str) -> dict[str, Any] | None:
    """Where a failing check's first finding is: offset, node, topic and queue where known."""
    found = verdict.get("findings") or {}
    if check == T.REPLICA_CONSISTENCY:
        failing = [
            r
            for r in found.get("ranges", [])
            if T.range_fails(r.get("verdict"), bool(r.get("allowed")), bool(r.get("lag_exceeded")))
        ]
        if not failing:
            return None
        r = failing[0]
        where = {
            "offset": _num(r.get("first_diff")),
            "node": r.get("node"),
            "topic": None,
            "queue": None,
        }
        if where["offset"] is None:
            where["offset"] = _num(r.get("start"))
        for w in (verdict.get("witnesses") or {}).get("divergent", []):
            if w.get("pair") == r.get("pair"):
                rec = w.get("master_record") or {}
                where.update(topic=rec.get("topic"), queue=_num(rec.get("queueId")))
                break
        return where
    if check in (T.LOG_INTEGRITY,):
        rows = found.get("records_issues") or []
        if rows:
            r = rows[0]
            return {
                "offset": _num(r.get("offset")),
                "node": r.get("node"),
                "topic": r.get("topic"),
                "queue": _num(r.get("queue_id")),
            }
    if check == T.ARCHIVE_INTEGRITY:
        rows = found.get("archive_faults") or []
        if rows:
            r = rows[0]
            return {
                "offset": _num(r.get("start")),
                "node": r.get("node"),
                "topic": None,
                "queue": None,
            }
    if check == T.ACKNOWLEDGED_DURABILITY:
        rows = found.get("acknowledged_durability") or []
        if rows:
            r = rows[0]
            return {
                "offset": _num(r.get("lost_start")),
                "node": r.get("slave"),
                "topic": None,
                "queue": None,
            }
    if check == T.OFFSET_MONOTONICITY:
        rows = found.get("offset_violations") or []
        if rows:
            r = rows[0]
            return {
                "offset": _num(r.get("after")),
                "node": r.get("node_after"),
                "topic": r.get("topic"),
                "queue": _num(r.get("queue_id")),
            }
    return None


def _check(verdict: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": c["name"],
        "status": c["status"],
        "passed": bool(c["passed"]),
        "findings": int(c["findings"]),
        "evidence": int(c["evidence"]),
        "detail": str(c.get("detail") or ""),
        "first": first_finding(verdict, c["name"]) if c["status"] == T.STATUS_FAIL else None,
    }


def differing_bytes(verdict: dict[str, Any]) -> dict[str, int]:
    """Per verdict (divergent, conflict), how many bytes differ inside its ranges (the ranges'
    ``differingBytes``, spark_jobs/witness.py; verdict.json lists the first ranges only)."""
    out: dict[str, int] = {}
    for r in (verdict.get("findings") or {}).get("ranges") or []:
        d = r.get("detail")
        if r.get("verdict") in (T.DIVERGENT, T.CONFLICT) and isinstance(d, str) and d[:1] == "{":
            try:
                n = json.loads(d).get("differingBytes")
            except (ValueError, AttributeError):
                continue
            if isinstance(n, int):
                out[r["verdict"]] = out.get(r["verdict"], 0) + n
    return out


def _range_count(verdict: str, n: int, nbytes: dict, differ: dict) -> dict[str, int]:
    out = {"count": int(n), "bytes": int(nbytes.get(verdict, 0))}
    if verdict in differ:
        out["differingBytes"] = differ[verdict]
    return out


def _group(v: dict[str, Any], gx: dict[str, Any] | None, report: str | None) -> dict[str, Any]:
    counts, nbytes = v.get("counts") or {}, v.get("bytes") or {}
    differ = differing_bytes(v)
    return {
        "name": v["brokerName"],
        "status": v["status"],
        "passed": bool(v["passed"]),
        "master": v.get("master"),
        "checks": [_check(v, c) for c in v["checks"]],
        "ranges": {k: _range_count(k, n, nbytes, differ) for k, n in sorted(counts.items())},
        "expectations": None
        if gx is None
        else {
            "success": bool(gx["success"]),
            "failedSuites": list(gx["failedSuites"]),
            "reportUrl": gx["reportUrl"],
        },
        "report": report,
        # what each consumer group's offset verdict stands on, and the delivery counts
        # (verdict.json's own fields; absent for a verdict written before they existed)
        **{k: v[k] for k in ("offsets", "delivery") if v.get(k) is not None},
    }


def audit_document(summary: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` document of one run: ``summary`` is the audit's (with ``groupVerdicts``),
    ``doc`` the published run document (expectations, reports, whether the run passed)."""
    gx = {g["brokerName"]: g for g in doc.get("expectations") or []}
    reports = doc.get("reports") or {}
    return {
        "schemaVersion": SCHEMA_VERSION,
        "command": "audit",
        "runId": summary["runId"],
        "cluster": summary["cluster"],
        "status": doc.get("status", summary["status"]),
        "passed": bool(doc["passed"]),
        "groups": [
            _group(v, gx.get(v["brokerName"]), reports.get(v["brokerName"]))
            for v in summary["groupVerdicts"]
        ],
    }


def where_text(first: dict[str, Any] | None) -> str:
    """`` first at offset 123 topic T queue 1 node n`` for a FAIL line (the known parts)."""
    if not first:
        return ""
    parts = [
        f"{k} {first[k]}" for k in ("offset", "topic", "queue", "node") if first.get(k) is not None
    ]
    return f"; first at {' '.join(parts)}" if parts else ""
