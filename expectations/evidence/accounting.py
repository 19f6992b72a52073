"""The report's offset coverage cell and its delivery section, from ``verdict.json``'s
``offsets`` and ``delivery`` (``spark_jobs/commit_history.py``, ``spark_jobs/delivery.py``).

Coverage says what each consumer group's offset verdict stands on: the evidence judged (every
commit as a record of the log, or snapshots of ``consumerOffset.json``), how many queues and
points, the time covered and the largest window in which a commit could have happened
unobserved. Delivery shows a run as OpenChaos does (enqueued, duplicated, redelivered, lost),
computed from the archive alone. Every value is escaped by :func:`sections.table`.
"""

from __future__ import annotations

from html import escape
from typing import Any

from expectations.evidence.checks import CheckView
from expectations.evidence.sections import offsets_section, table
from expectations.evidence.svg import fmt_time_ms

EVIDENCE_WORDS = {
    "records": "every commit record",
    "snapshots": "consumerOffset.json snapshots",
}


def fmt_duration_ms(ms: Any) -> str:
    """``0 ms``, ``850 ms``, ``12.5 s``, ``4 min 10 s``, ``3 h 20 min``; ``-`` when unknown."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms < 0:
        return "-"
    if ms < 1000:
        return f"{int(ms)} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s".replace(".0 s", " s")
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(m, 60)
    return f"{h} h {m} min" if m else f"{h} h"


def _blind(ms: Any) -> str:
    if ms is None:
        return "unknown (one snapshot alone saw it)"
    return fmt_duration_ms(ms)


def _span(c: dict) -> Any:
    a, b = c.get("coveredFromMs"), c.get("coveredToMs")
    return b - a if isinstance(a, int) and isinstance(b, int) else None


def coverage_html(verdict: dict | None) -> str:
    """The coverage cell: one row per consumer group; empty when the verdict has none."""
    doc = (verdict or {}).get("offsets")
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), dict):
        return ""
    groups = doc["groups"]
    if not groups:
        return '<p class="coverage">No consumer group committed an offset in the window.</p>'
    rows = [
        [
            g,
            EVIDENCE_WORDS.get(c.get("evidence"), c.get("evidence")),
            c.get("queues"),
            c.get("points"),
            fmt_time_ms(c.get("coveredFromMs")),
            fmt_time_ms(c.get("coveredToMs")),
            fmt_duration_ms(_span(c)),
            _blind(c.get("blindWindowMs")),
        ]
        for g, c in sorted(groups.items())
        if isinstance(c, dict)
    ]
    head = [
        "consumer group",
        "evidence judged",
        "queues",
        "points",
        "covered from",
        "covered to",
        "time covered",
        "largest unobserved window",
    ]
    return (
        '<div id="offset-coverage"><h3>Coverage</h3>'
        f"<p>Largest unobserved window over all groups: "
        f'<strong class="blind">{escape(_blind(doc.get("blindWindowMs")))}</strong> '
        "(0 when every commit is a record in the log; otherwise the longest gap between "
        "master snapshots).</p>"
        f"{table(head, rows, 'coverage')}</div>"
    )


def offsets_with_coverage(ev, view: CheckView) -> str:
    """Check 4's section: what it stands on, then its witnesses."""
    return coverage_html(ev.verdict) + offsets_section(ev, view)


def delivery_section(ev, view: CheckView) -> str:
    """The ``delivery`` check's section: the totals, per topic, duplicated keys, and per
    consumer group and queue the messages sent again after an offset moved back."""
    d = (ev.verdict or {}).get("delivery")
    if not isinstance(d, dict):
        return '<p class="incomplete">verdict.json carries no delivery accounting.</p>'
    keys = ("enqueued", "duplicated", "redelivered", "lost")
    out = [
        table(
            ["enqueued", "duplicated", "redelivered", "lost ranges"],
            [[d.get(k) for k in keys]],
            "counts delivery",
        )
    ]
    topics = d.get("topics") or {}
    if topics:
        out.append("<h3>Per topic</h3>")
        out.append(
            table(
                ["topic", "enqueued", "duplicated", "keys stored twice or more", "largest gap"],
                [
                    [
                        t,
                        r.get("enqueued"),
                        r.get("duplicated"),
                        r.get("keys"),
                        fmt_duration_ms(r.get("maxGapMs")),
                    ]
                    for t, r in sorted(topics.items())
                ],
            )
        )
    examples = d.get("duplicateExamples") or []
    if examples:
        out.append("<h3>Duplicated keys (most copies first)</h3>")
        out.append(
            table(
                ["topic", "UNIQ_KEY", "copies", "time between copies", "msgIds"],
                [
                    [
                        e.get("topic"),
                        e.get("uniqKey"),
                        e.get("copies"),
                        fmt_duration_ms(e.get("gapMs")),
                        ", ".join(e.get("msgIds") or []),
                    ]
                    for e in examples
                ],
                "witnesses",
            )
        )
    again = [
        [g, q, r.get("redelivered"), r.get("rewinds")]
        for g, info in sorted((d.get("groups") or {}).items())
        for q, r in sorted((info.get("queues") or {}).items())
    ]
    if again:
        out.append("<h3>Sent again after an offset moved back</h3>")
        out.append(table(["consumer group", "topic/queue", "redelivered", "rewinds"], again))
    return "".join(out)
