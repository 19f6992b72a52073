"""The hex/ASCII dump of a divergence: every differing byte marked on both lines (hex and ASCII),
the first one loudest; anything else in verdict.json's window is refused, never rendered."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from expectations.evidence.hexview import hex_window, window_bytes


@st.composite
def replicas(draw):
    m = draw(st.binary(min_size=1, max_size=160))
    s = bytearray(m)
    for i in draw(st.sets(st.integers(0, len(m) - 1), max_size=len(m))):
        s[i] ^= draw(st.integers(1, 255))
    return m, bytes(s)


@given(replicas(), st.integers(0, 2**40))
def test_every_differing_byte_is_marked_twice_per_side(pair, start):
    m, s = pair
    diffs = [i for i in range(len(m)) if m[i] != s[i]]
    first = start + diffs[0] if diffs else None
    html = hex_window({"start": start, "master": m.hex(), "slave": s.hex()}, ("a", "b"), first)
    assert html.count("<mark") == 4 * len(diffs)
    assert html.count('class="d first"') == (4 if diffs else 0)
    assert html.count("<tr class=") == 2 * -(-len(m) // 16)
    assert f"{len(diffs)} differ here" in html


@given(
    st.dictionaries(
        st.sampled_from(["start", "master", "slave", "x"]),
        st.one_of(st.integers(-5, 10**6), st.text(max_size=40), st.none()),
    )
)
def test_a_malformed_window_is_a_note_not_markup(w):
    html = hex_window(w, ("<a>", "b"), 3)
    if window_bytes(w) is None:
        assert html.startswith('<p class="incomplete">')
    assert "<a>" not in html and not re.search(r"<script", html)
