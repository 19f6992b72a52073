"""Check statuses and the one sentence that says why a check failed, from the run's outputs.

The statuses come from ``verdict.json`` (``checks[].status``; an older verdict with only
``passed`` is read as pass/fail), else from the ``checks`` table. The sentence names the first
witness from the check's own table, so a reader sees the offset without opening anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from contracts import audit_tables as at
from expectations.evidence.svg import fmt_bytes


@dataclass
class CheckView:
    name: str
    status: str | None  # pass | fail | no_evidence | None (not reported)
    findings: int | None
    evidence: int | None
    detail: str
    counts: dict[str, Any]

    @property
    def title(self) -> str:
        return at.CHECK_TITLES.get(self.name, self.name)


def _status(c: dict[str, Any]) -> str | None:
    s = c.get("status")
    if s in (at.STATUS_PASS, at.STATUS_FAIL, at.STATUS_NO_EVIDENCE):
        return s
    if isinstance(c.get("passed"), bool):
        return at.STATUS_PASS if c["passed"] else at.STATUS_FAIL
    return None


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return int(v) if math.isfinite(v) else None


def check_views(ev) -> list[CheckView]:
    """One view per check of ``contracts.CHECKS`` (in that order), then any other reported."""
    found: dict[str, CheckView] = {}
    reported = (ev.verdict or {}).get("checks")
    for c in reported if isinstance(reported, list) else []:
        if isinstance(c, dict) and isinstance(c.get("name"), str):
            found[c["name"]] = CheckView(
                c["name"],
                _status(c),
                _int(c.get("findings")),
                _int(c.get("evidence")),
                str(c.get("detail") or ""),
                c.get("counts") if isinstance(c.get("counts"), dict) else {},
            )
    for row in ev.tables["checks"].rows:
        name = row.get("check")
        if isinstance(name, str) and name not in found:
            found[name] = CheckView(
                name,
                _status(row),
                _int(row.get("findings")),
                _int(row.get("evidence")),
                str(row.get("reason") or ""),
                {},
            )
    order = [n for n in at.CHECKS] + sorted(n for n in found if n not in at.CHECKS)
    return [found.get(n) or CheckView(n, None, None, None, "", {}) for n in order]


def run_status(ev, views: list[CheckView]) -> str | None:
    s = (ev.verdict or {}).get("status")
    if s in (at.RUN_PASSED, at.RUN_FAILED, at.RUN_NO_EVIDENCE):
        return s
    statuses = [v.status for v in views if v.status]
    if not statuses:
        return None
    if ev.verdict and "status" not in ev.verdict and isinstance(ev.verdict.get("passed"), bool):
        if not ev.verdict["passed"]:
            return at.RUN_FAILED
    return at.run_status(statuses)


def failing_ranges(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        r
        for r in rows
        if at.range_fails(
            str(r.get("verdict")), bool(r.get("allowed")), bool(r.get("lag_exceeded"))
        )
    ]


def _more(n: int) -> str:
    return f" (and {n - 1} more)" if n > 1 else ""


def why(ev, view: CheckView) -> str:
    """One sentence: why ``view`` failed (or had no evidence), naming its first witness."""
    t = ev.tables
    if view.status == at.STATUS_NO_EVIDENCE:
        return f"nothing to judge: {view.detail or 'no evidence reported'}."
    n = view.findings or 0
    if view.name == at.REPLICA_CONSISTENCY and (bad := failing_ranges(t["ranges"].rows)):
        r = bad[0]
        where = f"{r.get('pair')} [{r.get('start')}, {r.get('end')})"
        diff = r.get("first_diff")
        at_diff = f", first differing byte at offset {int(diff)}" if diff is not None else ""
        return (
            f"{len(bad)} byte range(s) fail: {r.get('verdict')} {where}{at_diff}{_more(len(bad))}."
        )
    if view.name == at.ACKNOWLEDGED_DURABILITY and (rows := t["acked_losses"].rows):
        r = rows[0]
        size = fmt_bytes((r.get("lost_end") or 0) - (r.get("lost_start") or 0))
        return (
            f"acknowledged bytes [{r.get('lost_start')}, {r.get('lost_end')}) ({size}) are lost on "
            f"{r.get('slave')} ({r.get('verdict')}), promised by {r.get('snapshot')}{_more(len(rows))}."
        )
    if view.name == at.OFFSET_MONOTONICITY and (rows := t["offset_violations"].rows):
        r = rows[0]
        if r.get("kind") == "lost":
            return (
                f"lost: committed offset {r.get('before')} of {r.get('group_name')} on "
                f"{r.get('topic')} queue {r.get('queue_id')} ({r.get('node_before')}) is held by "
                f"no snapshot of the next master {r.get('node_after')}: it answers none, up to "
                f"{r.get('reconsumed_messages')} message(s) consumed again{_more(len(rows))}."
            )
        return (
            f"{r.get('kind')}: committed offset of {r.get('group_name')} on {r.get('topic')} "
            f"queue {r.get('queue_id')} went from {r.get('before')} to {r.get('after')} "
            f"({r.get('node_before')} \u2192 {r.get('node_after')}), "
            f"{r.get('reconsumed_messages')} message(s) consumed again{_more(len(rows))}."
        )
    if view.name == at.LOG_INTEGRITY and (rows := t["records_issues"].rows):
        r = rows[0]
        what = r.get("detail") or f"expected {r.get('expected')}, found {r.get('found')}"
        return f"{r.get('check')} on {r.get('node')} at offset {r.get('offset')}: {what}{_more(len(rows))}."

    if view.name == at.ARCHIVE_INTEGRITY and (rows := t["archive_faults"].rows):
        r = rows[0]
        return (
            f"{r.get('kind')}: {r.get('key')} ({r.get('detail') or 'see below'}){_more(len(rows))}."
        )
    if view.detail:
        return f"{n} finding(s): {view.detail}."
    return f"{n} finding(s); the table naming them is not available."
