"""The report's three plots, each an inline SVG string (or ``None`` with nothing to draw).

- replication lag per slave over time: for every snapshot of a master, its ``maxPhyOffset``
  minus each slave's ack offset (``slaves``), with role changes, lost masters and truncations
  marked as vertical lines;
- committed offset per (group, topic, queue) over time: the master's points as a step line,
  epochs shaded, regressions (``offset_violations``) and resets (``offset_reset`` events) marked;
- each pair's archived byte range coloured by verdict (``ranges``).
"""

from __future__ import annotations

from html import escape
from typing import Any

from contracts import audit_tables as at
from expectations.evidence.svg import PALETTE, WIDTH, Chart, Scale, fmt_bytes

VERDICT_COLORS = {
    at.MATCH: "#2e7d32",
    at.LAG: "#f9a825",
    at.EXTRA: "#8e24aa",
    at.DIVERGENT: "#c62828",
    at.MISSING: "#d84315",
    at.CONFLICT: "#ad1457",
    at.UNVERIFIABLE: "#90a4ae",
    at.EXPIRED: "#cfd8dc",
}
MAX_OFFSET_PLOTS = 24
_EVENT_MARKS = (
    "role_changed",
    "master_lost",
    "truncated",
    "elected",
    "election_failed",
    "sync_state_set_changed",
    "lease_lost",
)


def _event_label(e: dict[str, Any]) -> str:
    kind = e.get("kind")
    if kind == "role_changed":
        return f"{e.get('node')}: {e.get('from')} \u2192 {e.get('to')} (epoch {e.get('epoch')})"
    if kind == "truncated":
        return f"{e.get('node')}: truncated [{e.get('to')}, {e.get('from')})"
    if kind == "elected":  # the controller's record: node is the new master's address
        how = "unclean" if e.get("unclean") else "clean"
        return f"{e.get('node')}: elected ({how}, masterEpoch {e.get('masterEpoch')})"
    if kind == "sync_state_set_changed":
        return (
            f"{e.get('node')}: SyncStateSet {e.get('members')} (epoch {e.get('syncStateSetEpoch')})"
        )
    if kind == "lease_lost":
        return f"{e.get('node')}: master lease lost, writes fenced"
    return f"{e.get('node')}: {kind}"


def lag_points(snapshots: list[dict[str, Any]]) -> dict[str, list[tuple[int, int]]]:
    """{slave: [(takenAt, lag_bytes)]} from every master snapshot that carries ack offsets."""
    series: dict[str, list[tuple[int, int]]] = {}
    for s in snapshots:
        if s.get("role") == "SLAVE":
            continue
        for slave, ack in sorted((s.get("slaves") or {}).items()):
            lag = max(0, int(s["maxPhyOffset"]) - int(ack))
            series.setdefault(slave, []).append((int(s["takenAt"]), lag))
    return series


def lag_chart(snapshots: list[dict[str, Any]], events: list[dict[str, Any]]) -> str | None:
    series = lag_points(snapshots)
    if not series:
        return None
    marks = [e for e in events if e.get("kind") in _EVENT_MARKS]
    times = [t for pts in series.values() for t, _ in pts] + [int(e["at"]) for e in marks]
    top = max(v for pts in series.values() for _, v in pts)
    chart = Chart.make(
        "lag",
        "Replication lag per slave (master maxPhyOffset - slave ack)",
        (min(times), max(times)),
        (0, max(top * 1.1, 1024)),
    )
    for e in marks:
        cls = "event failover" if e.get("kind") in ("role_changed", "master_lost") else "event"
        chart.vline(int(e["at"]), _event_label(e), cls)
    for i, (slave, pts) in enumerate(sorted(series.items())):
        chart.line(pts, PALETTE[i % len(PALETTE)], f"slave {slave}")
    return chart.svg()


def _queue_key(row: dict[str, Any]) -> tuple[str, str, int]:
    return (str(row.get("group_name")), str(row.get("topic")), int(row.get("queue_id") or 0))


def _epoch_spans(points: list[dict[str, Any]]) -> list[tuple[int, int, int, str]]:
    """Consecutive runs of one (epoch, node) among the master's points: (start, end, epoch, node)."""
    spans: list[list] = []
    for p in points:
        key = (p.get("epoch"), p.get("node"))
        if spans and (spans[-1][2], spans[-1][3]) == key:
            spans[-1][1] = p["taken_at"]
        else:
            if spans:
                spans[-1][1] = p["taken_at"]
            spans.append([p["taken_at"], p["taken_at"], key[0], key[1]])
    return [tuple(s) for s in spans]


def offset_chart(qkey, rows, violations, resets) -> str:
    group, topic, queue = qkey
    masters = sorted((r for r in rows if r.get("role") != "SLAVE"), key=lambda r: r["taken_at"])
    slaves = [r for r in rows if r.get("role") == "SLAVE"]
    values = [int(r["committed"]) for r in rows]
    values += [int(v.get(k) or 0) for v in violations for k in ("before", "after")]
    times = [int(r["taken_at"]) for r in rows]
    times += [int(v.get("at_after") or 0) for v in violations if v.get("at_after")]
    times += [int(e["at"]) for e in resets]
    chart = Chart.make(
        "offsets",
        f"Committed offset of {group} on {topic} queue {queue}",
        (min(times), max(times)),
        (0, max(max(values) * 1.1, 10)),
        height=220,
        y_fmt="int",
    )
    for i, (a, b, epoch, node) in enumerate(_epoch_spans(masters)):
        fill = ("#e3f2fd", "#fff3e0")[i % 2]
        chart.span(a, b, fill, f"epoch {epoch} ({node})")
    for e in resets:
        chart.vline(
            int(e["at"]), f"offset reset {e.get('from')} \u2192 {e.get('to')}", "event reset"
        )
    chart.line([(r["taken_at"], r["committed"]) for r in masters], PALETTE[0], "master", step=True)
    if slaves:
        chart.line([(r["taken_at"], r["committed"]) for r in slaves], "#9e9e9e", "slave copy")
    for v in violations:
        if v.get("at_after") is None:
            continue
        label = (
            f"{v.get('kind')}: {v.get('before')} \u2192 {v.get('after')} "
            f"({v.get('node_before')} epoch {v.get('epoch_before')} \u2192 "
            f"{v.get('node_after')} epoch {v.get('epoch_after')})"
        )
        chart.marker(int(v["at_after"]), int(v.get("after") or 0), label)
    return chart.svg()


def offset_charts(timeline, violations, events, limit=MAX_OFFSET_PLOTS) -> tuple[list[str], int]:
    """One chart per (group, topic, queue), those with violations first; (charts, not drawn)."""
    by_queue: dict[tuple, list[dict]] = {}
    for r in timeline:
        if r.get("taken_at") is None or r.get("committed") is None:
            continue
        by_queue.setdefault(_queue_key(r), []).append(r)
    viol: dict[tuple, list[dict]] = {}
    for v in violations:
        viol.setdefault(_queue_key(v), []).append(v)
    resets: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("kind") == "offset_reset":
            k = (str(e.get("group")), str(e.get("topic")), int(e.get("queue") or 0))
            resets.setdefault(k, []).append(e)
    order = sorted(by_queue, key=lambda k: (k not in viol, k))
    charts = [
        offset_chart(k, by_queue[k], viol.get(k, []), resets.get(k, [])) for k in order[:limit]
    ]
    return charts, max(0, len(order) - limit)


def ranges_chart(ranges: list[dict[str, Any]]) -> str | None:
    """One bar per pair over the archived offsets, each range in its verdict's colour."""
    rows = [r for r in ranges if r.get("start") is not None and r.get("end") is not None]
    if not rows:
        return None
    pairs = sorted({str(r.get("pair") or f"{r.get('master')}->{r.get('node')}") for r in rows})
    lo, hi = min(int(r["start"]) for r in rows), max(int(r["end"]) for r in rows)
    bar_h, gap, top = 22, 14, 10
    height = top + len(pairs) * (bar_h + gap) + 40
    x = Scale(lo, hi, 150, WIDTH - 16)
    parts = []
    for i, pair in enumerate(pairs):
        y = top + i * (bar_h + gap)
        parts.append(
            f'<text class="tick" x="144" y="{y + 15}" text-anchor="end">{escape(pair)}</text>'
        )
        mine = sorted((r for r in rows if str(r.get("pair")) == pair), key=lambda r: r["start"])
        for r in mine:
            verdict = str(r.get("verdict"))
            x0, x1 = x(int(r["start"])), x(int(r["end"]))
            fails = at.range_fails(verdict, bool(r.get("allowed")), bool(r.get("lag_exceeded")))
            if x1 - x0 < 0.4 and not fails:
                continue  # narrower than a pixel and fine: its neighbours show the same colour
            tip = f"{pair} [{int(r['start'])}, {int(r['end'])}) {verdict}"
            parts.append(
                f'<rect class="range v-{escape(verdict)}" data-verdict="{escape(verdict)}" '
                f'x="{x0}" y="{y}" width="{max(x1 - x0, 1.5 if fails else 0.4)}" height="{bar_h}" '
                f'fill="{VERDICT_COLORS.get(verdict, "#000")}"><title>{escape(tip)}</title></rect>'
            )
    y_axis = top + len(pairs) * (bar_h + gap) + 6
    for v in x.ticks(5):
        parts.append(
            f'<text class="tick" x="{x(v)}" y="{y_axis + 10}" text-anchor="middle">'
            f"{escape(fmt_bytes(v))}</text>"
        )
    seen = sorted({str(r.get("verdict")) for r in rows})
    legend = "".join(
        f'<span class="key"><i style="background:{VERDICT_COLORS.get(v, "#000")}"></i>{escape(v)}</span>'
        for v in seen
    )
    return (
        '<figure class="chart"><figcaption>Archived byte ranges per pair, by verdict</figcaption>'
        f'<svg class="plot" data-plot="ranges" role="img" aria-label="byte ranges by verdict" '
        f'viewBox="0 0 {WIDTH} {height}">{"".join(parts)}</svg>'
        f'<div class="legend">{legend}</div></figure>'
    )
