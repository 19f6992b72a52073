"""The page: verdict first, then why, plots, per-check witnesses, links. One HTML string.

Self-contained: inline CSS and SVG, no script, and a Content-Security-Policy that forbids every
fetch (``default-src 'none'``), so the page opened from disk or from object storage never
requests anything. Links (Data Docs, raw tables) are relative to the report's own folder.
"""

from __future__ import annotations

from html import escape

from contracts import audit_tables as at
from expectations.evidence import plots
from expectations.evidence.accounting import delivery_section, offsets_with_coverage
from expectations.evidence.checks import check_views, run_status, why
from expectations.evidence.model import (
    DATA_DOCS_INDEX,
    EXPECTATIONS_NAME,
    VERDICT_NAME,
    RunEvidence,
)
from expectations.evidence.sections import SECTIONS as CHECK_SECTIONS
from expectations.evidence.svg import fmt_time_ms

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STATUS_LABEL = {
    at.RUN_PASSED: "PASSED",
    at.RUN_FAILED: "FAILED",
    at.RUN_NO_EVIDENCE: "NO EVIDENCE",
}
#: each check's section of the page (check 4 with its coverage cell, the delivery accounting)
SECTIONS = {
    **CHECK_SECTIONS,
    at.OFFSET_MONOTONICITY: offsets_with_coverage,
    at.DELIVERY: delivery_section,
}
CHECK_LABEL = {at.STATUS_PASS: "PASS", at.STATUS_FAIL: "FAIL", at.STATUS_NO_EVIDENCE: "NO EVIDENCE"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
main{max-width:1500px;margin:0 auto;padding:0 20px 40px}
header.verdict{padding:18px 20px;color:#fff}
header.verdict h1{margin:0;font-size:34px;letter-spacing:.04em}
.s-PASSED{background:#2e7d32}.s-FAILED{background:#c62828}.s-NO_EVIDENCE{background:#f57f17}
.s-INCOMPLETE{background:#455a64}
header dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:10px 0 0}
header dt{opacity:.85}header dd{margin:0;font-weight:600}
section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;margin:16px 0;padding:12px 16px}
h2{font-size:19px;margin:4px 0 10px}h3{font-size:16px;margin:14px 0 6px}
.incomplete-banner{border-left:6px solid #455a64;background:#eceff1}
p.incomplete{color:#455a64;font-style:italic}
ul.why li{margin:4px 0}
.badge{display:inline-block;min-width:88px;text-align:center;border-radius:3px;padding:1px 6px;
color:#fff;font-weight:700;font-size:12px}
.b-pass{background:#2e7d32}.b-fail{background:#c62828}.b-no_evidence{background:#f57f17}.b-none{background:#757575}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid #e0e0e0;padding:3px 7px;text-align:left;vertical-align:top}
thead th{background:#f5f5f5}td.none{color:#9e9e9e}
.scroll{max-width:100%;overflow-x:auto}
td{overflow-wrap:break-word}td.key,table.side small{overflow-wrap:anywhere}td.tok{white-space:nowrap}td.num{white-space:nowrap;overflow-wrap:normal;font-variant-numeric:tabular-nums}
table.witnesses td{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
table.counts td{white-space:nowrap}
table.side{width:100%;table-layout:fixed}table.side th:first-child{width:9em}
table.side small{overflow-wrap:anywhere;font-weight:400}
table.side tr.differs td{background:#ffebee;font-weight:700}
caption{caption-side:top;text-align:left;color:#616161;padding:2px 0}
table.hexdump{font:12px/1.35 ui-monospace,Menlo,Consolas,monospace}
table.hexdump td,table.hexdump th{white-space:pre;border-color:#eeeeee;padding:1px 6px}
table.hexdump tr.s td,table.hexdump tr.s th{border-bottom:1px solid #bdbdbd}
table.hexdump mark{background:#ffcdd2;color:#b71c1c}table.hexdump mark.first{background:#c62828;color:#fff}
strong.offset{font-family:ui-monospace,Menlo,Consolas,monospace;color:#c62828}
figure.chart{margin:10px 0 18px}figure.chart svg{width:100%;height:auto;background:#fff}
figcaption{font-weight:600;margin-bottom:4px}
.axis{stroke:#616161}.grid{stroke:#eeeeee}.tick{font-size:11px;fill:#616161}
.span-label{font-size:10px;fill:#5d4037}
.event line{stroke:#6d4c41;stroke-dasharray:4 3}
.event text{font-size:10px;fill:#6d4c41;paint-order:stroke;stroke:#fff;stroke-width:3px}
.failover line{stroke:#c62828;stroke-width:2}.failover text{fill:#c62828}
.reset line{stroke:#1565c0}.reset text{fill:#1565c0}
.violation path{fill:#c62828;stroke:#fff}
.legend{font-size:12px}.legend .key{margin-right:14px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
p.more{color:#616161}footer{color:#757575;font-size:12px;margin-top:20px}
"""


def _window(v: dict) -> str:
    w = v.get("window") if isinstance(v.get("window"), dict) else {}
    since, until = w.get("since"), w.get("until")
    if since is None and until is None:
        return "everything archived"
    return f"{fmt_time_ms(since) if since is not None else 'start'} \u2192 " + (
        fmt_time_ms(until) if until is not None else "now"
    )


def headline(ev: RunEvidence, status: str | None) -> tuple[str, str]:
    """(label, css class): a run with missing outputs cannot be confirmed as passed, so its
    headline is INCOMPLETE RUN; a failure stands whatever else is missing."""
    if ev.complete and status is not None:
        return STATUS_LABEL[status], str(status)
    if status == at.RUN_FAILED:
        return "FAILED \u2014 INCOMPLETE RUN", at.RUN_FAILED
    return "INCOMPLETE RUN", "INCOMPLETE"


def header(ev: RunEvidence, status: str | None) -> str:
    v = ev.verdict or {}
    label, cls = headline(ev, status)
    meta = [
        ("cluster", v.get("cluster") or "?"),
        ("group", ev.broker_name),
        ("master", v.get("master") or "?"),
        ("window", _window(v)),
        ("run", ev.run_id),
    ]
    if isinstance(v.get("requireEvidence"), bool):
        meta.append(("evidence required", "yes" if v["requireEvidence"] else "no"))
    if not ev.complete:
        meta.append(("outputs", f"incomplete run: {len(ev.missing)} missing or partial"))
        meta.append(("audit's own verdict", STATUS_LABEL.get(status) if status else "unknown"))
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(x))}</dd>" for k, x in meta)
    return f'<header class="verdict s-{cls}"><h1 id="verdict">{label}</h1><dl>{dl}</dl></header>'


def incomplete(ev: RunEvidence) -> str:
    if ev.complete:
        return ""
    items = "".join(f"<li>{escape(m)}</li>" for m in ev.missing)
    return (
        '<section class="incomplete-banner" id="incomplete"><h2>Incomplete run</h2>'
        "<p>This run's outputs are missing or partial; the sections below show what is there."
        f"</p><ul>{items}</ul></section>"
    )


def summary(ev: RunEvidence, views) -> str:
    failing = [v for v in views if v.status in (at.STATUS_FAIL, at.STATUS_NO_EVIDENCE)]
    why_list = "".join(
        f'<li data-check="{escape(v.name)}"><strong>{escape(v.title)}</strong> '
        f"({CHECK_LABEL[v.status]}): {escape(why(ev, v))}</li>"
        for v in failing
    )
    rows = []
    for v in views:
        badge = CHECK_LABEL.get(v.status, "NOT REPORTED")
        rows.append(
            f'<tr><td><span class="badge b-{v.status or "none"}">{badge}</span></td>'
            f'<td><a href="#check-{escape(v.name)}">{escape(v.title)}</a></td>'
            f'<td class="num">{"" if v.findings is None else v.findings}</td>'
            f'<td class="num">{"" if v.evidence is None else f"{v.evidence:,}"}</td>'
            f"<td>{escape(v.detail)}</td></tr>"
        )
    head = "<tr><th>status</th><th>check</th><th>findings</th><th>evidence</th><th>detail</th></tr>"
    why_html = f'<ul class="why">{why_list}</ul>' if why_list else "<p>Every check passed.</p>"
    return (
        f'<section id="why"><h2>Checks</h2>{why_html}'
        f'<div class="scroll"><table class="checks"><thead>{head}</thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def plots_section(ev: RunEvidence) -> str:
    out = ['<section id="plots"><h2>Plots</h2>', "<h3>Replication lag</h3>"]
    out.append(
        plots.lag_chart(ev.snapshots, ev.events)
        or '<p class="incomplete">No master snapshot in the window carries slave ack '
        "offsets: no lag to plot.</p>"
    )
    out.append("<h3>Committed consumer offsets</h3>")
    charts, rest = plots.offset_charts(
        ev.tables["offset_timeline"].rows, ev.tables["offset_violations"].rows, ev.events
    )
    out.extend(charts or ['<p class="incomplete">No committed offsets to plot.</p>'])
    if rest:
        out.append(
            f'<p class="more">{rest} more queue(s) not plotted: see offset_timeline.parquet</p>'
        )
    out.append("<h3>Archived byte ranges</h3>")
    out.append(
        plots.ranges_chart(ev.tables["ranges"].rows)
        or '<p class="incomplete">No byte ranges to draw.</p>'
    )
    out.extend(f'<p class="incomplete">{escape(n)}</p>' for n in ev.archive_notes)
    out.append("</section>")
    return "".join(out)


def links(ev: RunEvidence) -> str:
    items = []
    if ev.has_data_docs:
        items.append(
            f'<li><a id="data-docs" href="{DATA_DOCS_INDEX}">Great Expectations Data Docs '
            "of this run</a></li>"
        )
    else:
        items.append("<li>Great Expectations Data Docs: not published for this run</li>")
    for name, t in ev.tables.items():
        if t.present:
            items.append(
                f'<li><a href="{name}.parquet">{name}.parquet</a> ({t.total_rows:,} rows)</li>'
            )
    for doc in (VERDICT_NAME, EXPECTATIONS_NAME):
        if (
            doc == VERDICT_NAME
            and ev.verdict is not None
            or doc == EXPECTATIONS_NAME
            and ev.expectations
        ):
            items.append(f'<li><a href="{doc}">{doc}</a></li>')
    return (
        f'<section id="links"><h2>Data Docs and raw tables</h2><ul>{"".join(items)}</ul></section>'
    )


def render(ev: RunEvidence) -> str:
    views = check_views(ev)
    status = run_status(ev, views)
    label, _ = headline(ev, status)
    details = []
    for v in views:
        build = SECTIONS.get(v.name)
        if build is None:
            continue
        badge = CHECK_LABEL.get(v.status, "NOT REPORTED")
        details.append(
            f'<section id="check-{escape(v.name)}"><h2><span class="badge b-{v.status or "none"}">'
            f"{badge}</span> {escape(v.title)}</h2>{build(ev, v)}</section>"
        )
    title = f"{label}: haproof audit {ev.run_id} / {ev.broker_name}"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"{header(ev, status)}<main>{incomplete(ev)}{summary(ev, views)}{plots_section(ev)}"
        f"{''.join(details)}{links(ev)}"
        f"<footer>haproof evidence report, built from audits/{escape(ev.run_id)}/"
        f"{escape(ev.broker_name)}/</footer></main></body></html>"
    )
