"""The audit history page of a cluster (``audits/_history/{cluster}/index.html``): the nights as
a table, newest first, and their trends as plots (findings, bytes verified, replication lag,
blind window, duration), one series per group.

Self-contained like ``report.html``: inline CSS and SVG (``expectations/evidence/svg.py``), no
script, no external reference (a Content-Security-Policy forbids them). Built from the rows of
``pipeline.history`` (plain dicts), so it imports nothing but the chart kit.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from contracts import audit_tables as at
from expectations.evidence.svg import PALETTE, Chart, fmt_bytes, fmt_time_ms

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:0 20px 40px}
header{padding:16px 20px;color:#fff;background:#37474f}header h1{margin:0;font-size:26px}
section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;margin:16px 0;padding:12px 16px}
h2{font-size:19px;margin:4px 0 10px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #e0e0e0;padding:3px 7px;text-align:left}
thead th{background:#f5f5f5}.scroll{overflow-x:auto}td{white-space:nowrap}td.num{text-align:right;font-variant-numeric:tabular-nums}
.st{font-weight:700;color:#fff;border-radius:3px;padding:1px 6px}
.s-PASSED,.c-pass{background:#2e7d32}.s-FAILED,.c-fail{background:#c62828}
.s-NO_EVIDENCE,.c-no_evidence{background:#f57f17}.c-none{background:#757575}
figure.chart{margin:10px 0 18px}figure.chart svg{width:100%;height:auto;background:#fff}
figcaption{font-weight:600;margin-bottom:4px}
.axis{stroke:#616161}.grid{stroke:#eeeeee}.tick{font-size:11px;fill:#616161}
.legend{font-size:12px}.legend .key{margin-right:14px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
.failed path{fill:#c62828;stroke:#fff}
footer{color:#757575;font-size:12px;margin-top:20px}p.none{color:#757575;font-style:italic}
"""

#: (row field, title, y axis format)
TRENDS = (
    ("findings", "Findings per run", "int"),
    ("bytesVerified", "Bytes verified (matching replica ranges)", "bytes"),
    ("lagBytes", "Replication lag at the end of the run (bytes of lag ranges)", "bytes"),
    ("blindBytes", "Blind window (bytes the run could not verify)", "bytes"),
    ("seconds", "Duration of the group's audit (s)", "int"),
)
CHECK_SHORT = {"pass": "PASS", "fail": "FAIL", "no_evidence": "NO EV."}


def _window(w: dict[str, Any]) -> str:
    since, until = w.get("since"), w.get("until")
    if since is None and until is None:
        return "everything new"
    return f"{fmt_time_ms(since) if since is not None else 'start'} → " + (
        fmt_time_ms(until) if until is not None else "now"
    )


def _table(rows: list[dict[str, Any]]) -> str:
    names = {n for r in rows for n in r["checks"]}
    checks = [c for c in at.CHECKS if c in names] + sorted(names - set(at.CHECKS))
    head = "".join(f'<th title="{escape(c)}">{escape(c.replace("_", " "))}</th>' for c in checks)
    body = []
    for r in rows:
        cells = "".join(
            f'<td><span class="st c-{escape(r["checks"].get(c) or "none")}">'
            f"{escape(CHECK_SHORT.get(r['checks'].get(c), '-'))}</span></td>"
            for c in checks
        )
        secs = "-" if r.get("seconds") is None else f"{float(r['seconds']):.1f}"
        body.append(
            f'<tr data-run="{escape(r["runId"])}" data-group="{escape(r["group"])}">'
            f'<td><a href="../../{escape(r["runId"])}/{escape(r["group"])}/report.html">'
            f"{escape(r['runId'])}</a></td><td>{escape(r['group'])}</td>"
            f"<td>{escape(_window(r['window']))}</td>"
            f'<td><span class="st s-{escape(r["status"])}">{escape(r["status"])}</span></td>'
            f'{cells}<td class="num">{int(r["findings"])}</td>'
            f'<td class="num">{escape(fmt_bytes(r["bytesVerified"]))}</td>'
            f'<td class="num">{escape(fmt_bytes(r["lagBytes"]))}</td>'
            f'<td class="num">{escape(fmt_bytes(r["blindBytes"]))}</td>'
            f'<td class="num">{secs}</td></tr>'
        )
    return (
        '<div class="scroll"><table class="runs"><thead><tr><th>run</th><th>group</th><th>window</th>'
        f"<th>status</th>{head}<th>findings</th><th>verified</th><th>lag</th><th>blind</th>"
        f"<th>seconds</th></tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def trend_chart(rows: list[dict[str, Any]], field: str, title: str, y_fmt: str) -> str | None:
    """One trend: a line per group over the runs' times; failed runs marked."""
    pts = [r for r in rows if r.get("at") is not None and r.get(field) is not None]
    if not pts:
        return None
    times = [int(r["at"]) for r in pts]
    lo, hi = min(times), max(times)
    if lo == hi:  # one night: a day either side
        lo, hi = lo - 86_400_000, hi + 86_400_000
    top = max(float(r[field]) for r in pts) * 1.1
    top = max(4, math.ceil(top)) if y_fmt == "int" else max(top, 1024)  # whole ticks
    chart = Chart.make(field, title, (lo, hi), (0, top), height=220, y_fmt=y_fmt)
    for i, group in enumerate(sorted({r["group"] for r in pts})):
        series = [(int(r["at"]), float(r[field])) for r in pts if r["group"] == group]
        chart.line(series, PALETTE[i % len(PALETTE)], group)
        for r in pts:
            if r["group"] == group and not r.get("passed", True):
                chart.marker(int(r["at"]), float(r[field]), f"{r['runId']} {r['status']}", "failed")
    return chart.svg()


def render_history(doc: dict[str, Any]) -> str:
    """The page of ``pipeline.history.History.to_json()``."""
    rows = doc["runs"]
    cluster = str(doc["cluster"])
    charts = [trend_chart(rows, f, t, y) for f, t, y in TRENDS]
    plots = "".join(c for c in charts if c) or '<p class="none">no run with a time to plot</p>'
    skipped = "".join(f"<li>{escape(s)}</li>" for s in doc.get("skipped", []))
    runs = len({r["runId"] for r in rows})
    table = _table(rows) if rows else '<p class="none">no audit run of this cluster yet</p>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>haproof audit history: {escape(cluster)}</title><style>{CSS}</style></head>"
        f"<body><header><h1>Audit history: {escape(cluster)}</h1>"
        f"<div>{runs} run(s), newest first, from {escape(str(doc['root']))}/audits/</div>"
        f'</header><main><section id="trends"><h2>Trends</h2>{plots}</section>'
        f'<section id="runs"><h2>Runs</h2>{table}</section>'
        + (f'<section id="skipped"><h2>Skipped</h2><ul>{skipped}</ul></section>' if skipped else "")
        + "<footer>haproof audit history, rebuilt after each run (haproof audit history "
        "prints the same rows)</footer></main></body></html>"
    )
