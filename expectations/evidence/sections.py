"""Per-check sections of the report: counts and the witnesses of every failure, bounded.

Each list shows the first ``WITNESS_LIMIT`` rows and says how many more the raw table holds.
Every value is escaped; nothing from the tables is trusted as markup.
"""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from contracts import audit_tables as at
from expectations.evidence.checks import CheckView, failing_ranges
from expectations.evidence.hexview import hex_window
from expectations.evidence.svg import fmt_bytes, fmt_time_ms

WITNESS_LIMIT = 50
RECORD_FIELDS = (
    ("topic", "topic"),
    ("queueId", "queue"),
    ("queueOffset", "queue offset"),
    ("physicalOffset", "physical offset"),
    ("msgId", "msgId"),
    ("storeTimestamp", "store time"),
    ("bodyLength", "body length"),
    ("bodyCRC", "body CRC"),
    ("crcOk", "CRC ok"),
    ("size", "record size"),
)


def cell(v: Any) -> str:
    """A table cell; a number is one unbreakable line (``td.num``), words wrap whole, and only
    a long key or id may break anywhere (``td.key``)."""
    if v is None:
        return '<td class="none">-</td>'
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v = int(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f'<td class="num">{escape(str(v))}</td>'
    text = str(v)
    if len(text) > 24 and ("/" in text or " " not in text):  # an object key, a msgId: may break
        return f'<td class="key">{escape(text)}</td>'
    if text and not any(ch.isspace() for ch in text):  # one short token: a node, a verdict
        return f'<td class="tok">{escape(text)}</td>'
    return f"<td>{escape(text)}</td>"


def table(headers: list[str], rows: list[list[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(cell(v) for v in r) + "</tr>" for r in rows)
    return (
        f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def bounded(rows: list[dict], total: int, what: str, raw: str) -> tuple[list[dict], str]:
    shown = rows[:WITNESS_LIMIT]
    rest = max(total, len(rows)) - len(shown)
    note = (
        f'<p class="more">and {rest} more {escape(what)} not shown: see '
        f'<a href="{escape(raw)}">{escape(raw)}</a></p>'
        if rest > 0
        else ""
    )
    return shown, note


def _partial(t) -> str:
    if not t.present:
        return f'<p class="incomplete">table {escape(t.name)} is missing: nothing to list.</p>'
    if t.missing_columns:
        cols = ", ".join(t.missing_columns)
        return f'<p class="incomplete">table {escape(t.name)} lacks {escape(cols)}.</p>'
    return ""


def _record_value(rec: dict[str, Any], key: str) -> Any:
    v = rec.get(key)
    return fmt_time_ms(v) if key == "storeTimestamp" and isinstance(v, int) else v


def record_pair(w: dict[str, Any]) -> str:
    """A divergence witness: both records at the first differing offset, side by side."""
    m, n = w.get("master_record"), w.get("node_record")
    m, n = (m if isinstance(m, dict) else {}), (n if isinstance(n, dict) else {})
    pair = str(w.get("pair") or "")
    names = pair.split("->", 1) if "->" in pair else ["master", "node"]
    rows = []
    for key, label in RECORD_FIELDS:
        if key not in m and key not in n:
            continue
        a, b = _record_value(m, key), _record_value(n, key)
        cls = ' class="differs"' if a != b else ""
        rows.append(f"<tr{cls}><th>{escape(label)}</th>{cell(a)}{cell(b)}</tr>")
    diff = w.get("first_diff")
    diff = int(diff) if isinstance(diff, (int, float)) and math.isfinite(diff) else None
    n = w.get("differing_bytes")
    count = (
        f"; {n:,} differing byte(s) in the range"
        if isinstance(n, int) and not isinstance(n, bool)
        else ""
    )
    return (
        f'<div class="witness divergence"><p>First differing byte of {escape(pair)} at offset '
        f'<strong class="offset">{"?" if diff is None else diff}</strong>{escape(count)}'
        f"</p>{hex_window(w.get('window'), (names[0], names[1]), diff)}"
        f'<div class="scroll"><table class="side"><caption>the records there, decoded'
        f"</caption><thead><tr><th></th><th>{escape(names[0])} "
        f"<small>{escape(str(w.get('master_key') or ''))}</small></th><th>{escape(names[1])} "
        f"<small>{escape(str(w.get('node_key') or ''))}</small></th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div></div>"
    )


def differing(r: dict[str, Any]) -> int | None:
    """A divergent or conflict range's count of differing bytes, from its JSON detail."""
    d = r.get("detail")
    if r.get("verdict") not in (at.DIVERGENT, at.CONFLICT) or not isinstance(d, str):
        return None
    try:
        n = json.loads(d).get("differingBytes") if d.startswith("{") else None
    except (ValueError, AttributeError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def readable_detail(r: dict[str, Any]) -> str:
    """A range's detail for a person: its text, or for a JSON witness what it says in words."""
    d = r.get("detail")
    if isinstance(d, str) and d.startswith("{"):
        return "witness below" if r.get("verdict") in (at.DIVERGENT, at.CONFLICT) else ""
    return "" if d is None else str(d)


def replica_section(ev, view: CheckView) -> str:
    t = ev.tables["ranges"]
    summary = (
        "<p>No byte range was compared.</p>"
        if not t.verdict_counts
        else table(
            ["verdict", "ranges", "bytes"],
            [[v, n, f"{fmt_bytes(b)} ({b:,})"] for v, (n, b) in sorted(t.verdict_counts.items())],
            "counts",
        )
    )
    bad = failing_ranges(t.rows)
    diffs = [n for n in (differing(r) for r in t.rows) if n is not None]
    if diffs:
        summary += (
            f"<p>{sum(diffs):,} byte(s) differ inside the divergent ranges compared "
            "(the table counts each range's whole length).</p>"
        )
    shown, more = bounded(bad, len(bad), "failing ranges", f"{t.name}.parquet")
    out = [summary, _partial(t)]
    if shown:
        out.append(
            table(
                [
                    "pair",
                    "start",
                    "end",
                    "bytes",
                    "verdict",
                    "first differing offset",
                    "differing bytes",
                    "detail",
                ],
                [
                    [
                        r.get("pair"),
                        r.get("start"),
                        r.get("end"),
                        r.get("bytes"),
                        r.get("verdict"),
                        r.get("first_diff"),
                        differing(r),
                        readable_detail(r),
                    ]
                    for r in shown
                ],
                "witnesses",
            )
            + more
        )
    found = (ev.verdict or {}).get("witnesses")
    witnesses = found.get("divergent") if isinstance(found, dict) else None
    witnesses = witnesses if isinstance(witnesses, list) else []
    ws, wmore = bounded(
        [w for w in witnesses if isinstance(w, dict)],
        len(witnesses),
        "divergence witnesses",
        "verdict.json",
    )
    out.extend(record_pair(w) for w in ws)
    out.append(wmore)
    if any(r.get("verdict") in (at.DIVERGENT, at.CONFLICT) for r in bad) and not ws:
        out.append(
            '<p class="incomplete">verdict.json carries no decoded records for the '
            "divergent ranges (witnesses.divergent).</p>"
        )
    return "".join(out)


def durability_section(ev, view: CheckView) -> str:
    t = ev.tables["acked_losses"]
    shown, more = bounded(t.rows, t.total_rows, "lost ranges", f"{t.name}.parquet")
    if not shown:
        return _partial(t) or "<p>No acknowledged byte was lost.</p>"
    return (
        _partial(t)
        + table(
            [
                "kind",
                "slave",
                "lost from",
                "lost to",
                "bytes",
                "ack offset",
                "verdict",
                "promised by",
            ],
            [
                [
                    r.get("kind"),
                    r.get("slave"),
                    r.get("lost_start"),
                    r.get("lost_end"),
                    (r.get("lost_end") or 0) - (r.get("lost_start") or 0),
                    r.get("ack"),
                    r.get("verdict"),
                    r.get("snapshot"),
                ]
                for r in shown
            ],
            "witnesses",
        )
        + more
    )


def offsets_section(ev, view: CheckView) -> str:
    t, tl = ev.tables["offset_violations"], ev.tables["offset_timeline"]
    points = f"<p>{tl.total_rows:,} committed-offset points judged.</p>" if tl.present else ""
    if tl.thinned:
        points += (
            f'<p class="more">The plots draw {len(tl.rows):,} of them: per queue and '
            "time bin the lowest and highest, and every change of node or epoch.</p>"
        )
    shown, more = bounded(t.rows, t.total_rows, "violations", f"{t.name}.parquet")
    if not shown:
        return points + (_partial(t) or "<p>No committed offset went backwards.</p>")
    return (
        points
        + _partial(t)
        + table(
            [
                "kind",
                "group",
                "topic",
                "queue",
                "before",
                "after",
                "node before \u2192 after",
                "epoch before \u2192 after",
                "at before",
                "at after",
                "failover between",
                "re-consumed",
            ],
            [
                [
                    r.get("kind"),
                    r.get("group_name"),
                    r.get("topic"),
                    r.get("queue_id"),
                    r.get("before"),
                    r.get("after"),
                    f"{r.get('node_before')} \u2192 {r.get('node_after')}",
                    f"{r.get('epoch_before')} \u2192 {r.get('epoch_after')}",
                    fmt_time_ms(r.get("at_before")),
                    fmt_time_ms(r.get("at_after")),
                    r.get("failover"),
                    r.get("reconsumed_messages"),
                ]
                for r in shown
            ],
            "witnesses",
        )
        + more
    )


def integrity_section(ev, view: CheckView) -> str:
    t = ev.tables["records_issues"]
    records = (ev.verdict or {}).get("recordsChecked")
    head = f"<p>{int(records):,} records checked.</p>" if isinstance(records, int) else ""
    shown, more = bounded(t.rows, t.total_rows, "issues", f"{t.name}.parquet")
    if not shown:
        return head + (_partial(t) or "<p>Every record checked is intact.</p>")
    return (
        head
        + _partial(t)
        + table(
            [
                "node",
                "offset",
                "check",
                "topic",
                "queue",
                "queue offset",
                "msgId",
                "expected",
                "found",
                "object",
                "detail",
            ],
            [
                [
                    r.get("node"),
                    r.get("offset"),
                    r.get("check"),
                    r.get("topic"),
                    r.get("queue_id"),
                    r.get("queue_offset"),
                    r.get("msg_id"),
                    r.get("expected"),
                    r.get("found"),
                    r.get("key"),
                    r.get("detail"),
                ]
                for r in shown
            ],
            "witnesses",
        )
        + more
    )


def archive_section(ev, view: CheckView) -> str:
    t = ev.tables["archive_faults"]
    shown, more = bounded(t.rows, t.total_rows, "faults", f"{t.name}.parquet")
    if not shown:
        return _partial(t) or "<p>Every archived object is present and matches its manifest.</p>"
    return (
        _partial(t)
        + table(
            ["node", "key", "kind", "start", "end", "detail"],
            [
                [
                    r.get("node"),
                    r.get("key"),
                    r.get("kind"),
                    r.get("start"),
                    r.get("end"),
                    r.get("detail"),
                ]
                for r in shown
            ],
            "witnesses",
        )
        + more
    )


SECTIONS = {
    at.ARCHIVE_INTEGRITY: archive_section,
    at.REPLICA_CONSISTENCY: replica_section,
    at.ACKNOWLEDGED_DURABILITY: durability_section,
    at.LOG_INTEGRITY: integrity_section,
    at.OFFSET_MONOTONICITY: offsets_section,
}
