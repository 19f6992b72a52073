"""A tiny SVG chart kit: linear scales, axes, lines, markers, spans; text always escaped.

Charts are plain strings of inline SVG (no script, no external reference), sized by a viewBox so
they scale with the page. Long series are reduced per pixel column to their min and max, which
keeps every spike visible and the page small.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from html import escape

WIDTH = 900
PAD_L, PAD_R, PAD_T, PAD_B = 78, 34, 18, 38
PALETTE = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#00838f", "#ad1457", "#4e342e")


def fmt_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _utc(ms: float) -> dt.datetime | None:
    """The instant ``ms`` (epoch milliseconds), or None when no calendar holds it."""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    except (OverflowError, ValueError, OSError, TypeError):
        return None


def fmt_time_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    t = _utc(ms)
    if t is None:
        return f"{ms} ms"
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{int(ms) % 1000:03d}Z"


def _tick_time(ms: float, span_ms: float) -> str:
    t = _utc(ms)
    if t is None:
        return f"{ms:.0f}"
    if span_ms < 30_000:  # ticks a few seconds apart: tenths tell them apart
        return t.strftime("%H:%M:%S.") + str(t.microsecond // 100_000)
    return t.strftime("%H:%M:%S") if span_ms < 2 * 86_400_000 else t.strftime("%m-%d %H:%M")


@dataclass
class Scale:
    lo: float
    hi: float
    out_lo: float
    out_hi: float

    def __post_init__(self) -> None:
        if self.hi <= self.lo:
            self.hi = self.lo + 1

    def __call__(self, v: float) -> float:
        frac = (v - self.lo) / (self.hi - self.lo)
        return round(self.out_lo + frac * (self.out_hi - self.out_lo), 1)

    def ticks(self, n: int = 5) -> list[float]:
        step = (self.hi - self.lo) / n
        return [self.lo + i * step for i in range(n + 1)]


def reduce_points(points: list[tuple[float, float]], x: Scale) -> list[tuple[float, float]]:
    """At most two points (min and max y, in time order) per output pixel column."""
    if len(points) <= 2 * (x.out_hi - x.out_lo):
        return points
    buckets: dict[int, list[tuple[float, float]]] = {}
    for p in points:
        buckets.setdefault(int(x(p[0])), []).append(p)
    out = []
    for col in sorted(buckets):
        b = buckets[col]
        lo, hi = min(b, key=lambda p: p[1]), max(b, key=lambda p: p[1])
        out.extend(sorted({lo, hi}))
    return out


@dataclass
class Chart:
    """A time (or offset) x axis and a numeric y axis; call the draw methods, then ``svg()``."""

    kind: str  # data-plot attribute, e.g. "lag"
    title: str
    x: Scale
    y: Scale
    height: int = 260
    x_is_time: bool = True
    y_fmt: str = "bytes"  # bytes | int
    parts: list[str] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def make(cls, kind, title, x_range, y_range, height=260, **kw) -> Chart:
        x = Scale(x_range[0], x_range[1], PAD_L, WIDTH - PAD_R)
        y = Scale(y_range[0], y_range[1], height - PAD_B, PAD_T)
        return cls(kind, title, x, y, height, **kw)

    def _y_label(self, v: float) -> str:
        return fmt_bytes(v) if self.y_fmt == "bytes" else f"{v:,.0f}"

    def _x_label(self, v: float) -> str:
        return _tick_time(v, self.x.hi - self.x.lo) if self.x_is_time else fmt_bytes(v)

    def axes(self) -> str:
        out = []
        x0, x1, y0, y1 = self.x.out_lo, self.x.out_hi, self.y.out_lo, self.y.out_hi
        out.append(f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}"/>')
        out.append(f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}"/>')
        for v in self.y.ticks(4):
            yy = self.y(v)
            out.append(f'<line class="grid" x1="{x0}" y1="{yy}" x2="{x1}" y2="{yy}"/>')
            label = escape(self._y_label(v))
            out.append(
                f'<text class="tick" x="{x0 - 6}" y="{yy + 4}" text-anchor="end">{label}</text>'
            )
        for v in self.x.ticks(5):
            xx = self.x(v)
            label = escape(self._x_label(v))
            out.append(
                f'<text class="tick" x="{xx}" y="{y0 + 16}" text-anchor="middle">{label}</text>'
            )
        return "".join(out)

    def span(self, a: float, b: float, fill: str, label: str = "") -> None:
        xa, xb = self.x(max(a, self.x.lo)), self.x(min(b, self.x.hi))
        h = self.y.out_lo - self.y.out_hi
        tip = f"<title>{escape(label)}</title>" if label else ""
        self.parts.append(
            f'<rect class="span" x="{xa}" y="{self.y.out_hi}" width="{max(xb - xa, 1)}" '
            f'height="{h}" fill="{fill}">{tip}</rect>'
        )
        if label:
            self.parts.append(
                f'<text class="span-label" x="{xa + 3}" y="{self.y.out_hi + 11}">{escape(label)}</text>'
            )

    def vline(self, at: float, label: str, cls: str = "event") -> None:
        xx = self.x(at)
        row = sum(p.startswith('<g class="event') for p in self.parts) % 4  # stagger labels
        right = xx > self.x.out_lo + 0.7 * (
            self.x.out_hi - self.x.out_lo
        )  # near the end: leftwards
        anchor = f'x="{xx - 3}" text-anchor="end"' if right else f'x="{xx + 3}"'
        self.parts.append(
            f'<g class="{cls}"><line x1="{xx}" y1="{self.y.out_lo}" x2="{xx}" y2="{self.y.out_hi}"/>'
            f'<text {anchor} y="{self.y.out_hi + 22 + row * 12}">{escape(label)}</text>'
            f"<title>{escape(label)}</title></g>"
        )

    def line(self, points: list[tuple[float, float]], color: str, name: str, step=False) -> None:
        pts = reduce_points(sorted(points), self.x)
        if not pts:
            return
        coords, prev = [], None
        for px, py in pts:
            xx, yy = self.x(px), self.y(py)
            if step and prev is not None:
                coords.append(f"{xx},{prev}")
            coords.append(f"{xx},{yy}")
            prev = yy
        self.parts.append(
            f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{color}" '
            f'stroke-width="1.8" points="{" ".join(coords)}"/>'
        )
        for px, py in pts[:: max(1, len(pts) // 60)]:
            self.parts.append(
                f'<circle class="pt" cx="{self.x(px)}" cy="{self.y(py)}" r="2" fill="{color}"/>'
            )
        self.legend.append((color, name))

    def marker(self, at: float, value: float, label: str, cls: str = "violation") -> None:
        xx, yy = self.x(at), self.y(value)
        self.parts.append(
            f'<g class="{cls}"><path d="M{xx},{yy - 7} L{xx + 6},{yy + 5} L{xx - 6},{yy + 5} Z"/>'
            f"<title>{escape(label)}</title></g>"
        )

    def svg(self) -> str:
        legend = "".join(
            f'<span class="key"><i style="background:{c}"></i>{escape(n)}</span>'
            for c, n in self.legend
        )
        return (
            f'<figure class="chart"><figcaption>{escape(self.title)}</figcaption>'
            f'<svg class="plot" data-plot="{escape(self.kind)}" role="img" '
            f'aria-label="{escape(self.title)}" viewBox="0 0 {WIDTH} {self.height}" '
            f'preserveAspectRatio="xMinYMin meet">{self.axes()}{"".join(self.parts)}</svg>'
            f'<div class="legend">{legend}</div></figure>'
        )
