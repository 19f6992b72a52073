"""Debian's Chromium driven by Playwright (never a downloaded browser), and what a test needs to
judge a rendered page: every request it made, console errors, screenshot pixels.

Screenshots are kept under ``test-artifacts/report/`` (git-ignored; ``HAPROOF_ARTIFACTS``
overrides) and their paths printed, so a reviewer can look at what the test saw.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = os.environ.get("HAPROOF_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = (
    Path(
        os.environ.get("HAPROOF_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
    )
    / "report"
)


@dataclass
class Visit:
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def browser_context(tmp_path_factory, offline: bool = True):
    """A fresh persistent profile (``--user-data-dir``) in headless Debian Chromium; offline
    unless the test serves the page itself over 127.0.0.1."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (scripts/bootstrap installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    ctx = pw.chromium.launch_persistent_context(
        str(tmp_path_factory.mktemp("chromium-profile")),
        executable_path=CHROMIUM,
        headless=True,
        args=FLAGS,
        viewport={"width": 1200, "height": 900},
        offline=offline,
    )
    return pw, ctx


def open_page(ctx, url: str):
    """Open ``url`` in a new tab, recording every request, failure and console error."""
    visit = Visit()
    page = ctx.new_page()
    page.on("request", lambda r: visit.requests.append(r.url))
    page.on("requestfailed", lambda r: visit.failed.append(r.url))
    page.on("console", lambda m: m.type == "error" and visit.console_errors.append(m.text))
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    return page, visit


def screenshot(page, name: str, locator=None) -> bytes:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    data = (locator or page).screenshot(path=str(path), **({} if locator else {"full_page": True}))
    print(f"screenshot: {path}")
    return data


def png_pixels(data: bytes) -> np.ndarray:
    """Decode an 8-bit, non-interlaced RGB/RGBA PNG (what Chromium writes) to (h, w, c)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, [], 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and not interlace, "unsupported PNG"
            chans = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    raw = zlib.decompress(b"".join(idat))
    stride = width * chans
    rows, prev = [], [0] * stride
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]
        if f == 0:
            cur = list(line)
        elif f == 1:  # Sub: a running sum per channel
            cur = (
                (np.cumsum(np.frombuffer(line, np.uint8).reshape(width, chans), 0, np.int64) & 0xFF)
                .reshape(-1)
                .tolist()
            )
        elif f == 2:
            cur = [(v + b) & 0xFF for v, b in zip(line, prev, strict=True)]
        else:
            cur = _unfilter_slow(f, line, prev, chans)
        rows.append(cur)
        prev = cur
    return np.array(rows, np.uint8).reshape(height, width, chans)


def _unfilter_slow(f: int, line: bytes, prev: list[int], chans: int) -> list[int]:
    """Average (3) and Paeth (4): each byte depends on the one left of it."""
    cur = [0] * len(line)
    for x, v in enumerate(line):
        a = cur[x - chans] if x >= chans else 0
        b = prev[x]
        if f == 3:
            pred = (a + b) >> 1
        else:
            c = prev[x - chans] if x >= chans else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
        cur[x] = (v + pred) & 0xFF
    return cur


def ink(data: bytes) -> float:
    """Share of pixels that are not the background (the most common colour)."""
    px = png_pixels(data)[..., :3].reshape(-1, 3)
    colours, counts = np.unique(px, axis=0, return_counts=True)
    return 1.0 - counts.max() / len(px)
