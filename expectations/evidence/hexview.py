"""Both replicas' bytes around a divergence's first differing byte, as a hex/ASCII dump: 16
bytes a line, each line of the master followed by the same line of the slave, every differing
byte marked (the first one twice as loud). The bytes come from the witness's ``window``
(``spark_jobs/witness.py``), hex strings from verdict.json: nothing in them is trusted."""

from __future__ import annotations

import re
from html import escape
from typing import Any

LINE = 16
_HEX = re.compile(r"^(?:[0-9a-f]{2})*$")
MAX_WINDOW_BYTES = 4096  # a window larger than this is not ours: not shown


def window_bytes(w: Any) -> tuple[int, bytes, bytes] | None:
    """(start offset, master bytes, slave bytes) of a witness's window, or None when it is
    absent or malformed."""
    if not isinstance(w, dict):
        return None
    start, m, s = w.get("start"), w.get("master"), w.get("slave")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        return None
    if not (isinstance(m, str) and isinstance(s, str)) or len(m) != len(s):
        return None
    if len(m) > 2 * MAX_WINDOW_BYTES or not _HEX.match(m) or not _HEX.match(s):
        return None
    return start, bytes.fromhex(m), bytes.fromhex(s)


def _ascii(b: int) -> str:
    return chr(b) if 0x20 <= b < 0x7F else "."


def _cells(data: bytes, other: bytes, first: int | None, at: int) -> tuple[str, str]:
    hexes, chars = [], []
    for k in range(LINE):
        if at + k >= len(data):
            hexes.append('<span class="pad">  </span>')
            continue
        b = data[at + k]
        h, c = f"{b:02x}", escape(_ascii(b))
        if b != other[at + k]:
            cls = "d first" if at + k == first else "d"
            h, c = f'<mark class="{cls}">{h}</mark>', f'<mark class="{cls}">{c}</mark>'
        hexes.append(h)
        chars.append(c)
    return " ".join(hexes), "".join(chars)


def hex_window(w: Any, names: tuple[str, str], first_diff: int | None) -> str:
    """The dump's HTML, or a note when the witness carries no usable window."""
    got = window_bytes(w)
    if got is None:
        return '<p class="incomplete">no bytes around the first difference in verdict.json.</p>'
    start, m, s = got
    first = (
        first_diff - start
        if isinstance(first_diff, int) and start <= first_diff < start + len(m)
        else None
    )
    rows = []
    for at in range(0, len(m), LINE):
        for name, data, other, cls in ((names[0], m, s, "m"), (names[1], s, m, "s")):
            hexes, chars = _cells(data, other, first, at)
            rows.append(
                f'<tr class="{cls}"><td class="num">{start + at}</td><th>{escape(name)}</th>'
                f'<td class="hex">{hexes}</td><td class="asc">{chars}</td></tr>'
            )
    n = sum(a != b for a, b in zip(m, s, strict=True))
    return (
        f'<div class="scroll"><table class="hexdump"><caption>bytes {start:,}-'
        f"{start + len(m) - 1:,} of both replicas; {n} differ here (marked)</caption>"
        f"<thead><tr><th>offset</th><th>node</th><th>hex</th><th>ASCII</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
