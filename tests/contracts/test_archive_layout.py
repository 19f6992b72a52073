"""Archive layout v1 keys and documents (DESIGN.md section 3)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import archive_layout as L


def test_chunk_key_is_zero_padded_and_sortable() -> None:
    key = L.chunk_key("c1", "broker-a", "broker-a-0", 0, 8192, 0)
    assert key == (
        "v1/c1/broker-a/broker-a-0/commitlog/00000000xxxxxxxxxxxx/00000000000xxxxxxxxx/"
        "00000000000000xxxxxx/00000000000000000000-00000000000000008192-0.log"
    )
    assert L.manifest_key(key).endswith("-0.json")
    later = L.chunk_key("c1", "broker-a", "broker-a-0", 8192, 9000, 0)
    assert sorted([later, key]) == [key, later]


def test_parse_key_roundtrips_every_kind() -> None:
    ck = L.chunk_key("c", "b", "n", 100, 200, 3)
    p = L.parse_key(ck)
    assert (p.kind, p.start, p.end, p.epoch, p.node) == ("chunk", 100, 200, 3, "n")
    assert L.parse_key(L.manifest_key(ck)).kind == "manifest"
    s = L.parse_key(L.snapshot_key("c", "b", "n", 1_700_000_000_000))
    assert (s.kind, s.at_ms) == ("snapshot", 1_700_000_000_000)
    e = L.parse_key(L.event_key("c", "b", "n", 5, "role_changed"))
    assert (e.kind, e.at_ms, e.event_kind) == ("event", 5, "role_changed")
    assert L.parse_key(L.audit_state_key("c", "b")).kind == "audit_state"
    assert L.parse_key("v1/c/b/n/commitlog/garbage.log") is None
    assert L.parse_key("other/thing") is None


def test_snapshot_key_has_13_digit_ms() -> None:
    assert L.snapshot_key("c", "b", "n", 42).endswith(
        "/snapshots/000xxxxxxxxxx/00000xxxxxxxx/0000000000042.json"
    )


@pytest.mark.parametrize("bad", ["", "a/b", "..", "_audit", " x"])
def test_bad_names_are_rejected(bad: str) -> None:
    with pytest.raises(L.LayoutError):
        L.node_prefix("c", "b", bad)


def test_unknown_event_kind_rejected() -> None:
    with pytest.raises(L.LayoutError, match="unknown event kind"):
        L.event_key("c", "b", "n", 1, "exploded")


def test_manifest_roundtrip_and_validation() -> None:
    man = L.ChunkManifest(0, 100, 2, 1, 2, "ab" * 32, "n", 0, "SYNC_MASTER", 0, 3, 1024)
    assert L.ChunkManifest.from_json(man.to_json()) == man
    doc = json.loads(man.to_json())
    del doc["sha256"]
    with pytest.raises(L.LayoutError, match="sha256"):
        L.ChunkManifest.from_json(doc, what="k.json")
    doc = json.loads(man.to_json())
    doc["start"] = True
    with pytest.raises(L.LayoutError, match="start"):
        L.ChunkManifest.from_json(doc)


def test_snapshot_requires_strict_fields_and_known_role() -> None:
    snap = L.Snapshot("n", "b", 0, "ASYNC_MASTER", 1, 5, 100, 100, 90, slaves={"s": 80})
    assert L.Snapshot.from_json(snap.to_json()) == snap
    doc = json.loads(snap.to_json())
    doc["role"] = "MASTER"
    with pytest.raises(L.LayoutError, match="role"):
        L.Snapshot.from_json(doc)


def test_events_need_their_fields() -> None:
    ev = L.make_event("truncated", "n", "c", "b", 10, 2, **{"from": 500, "to": 300})
    assert L.parse_event(json.dumps(ev))["to"] == 300
    bad = L.make_event("offset_reset", "n", "c", "b", 10, 2, group="g")
    with pytest.raises(L.LayoutError, match="topic"):
        L.parse_event(bad)


OFFSETS = st.integers(0, 10**15)
TIMES = st.integers(0, 10**13 - 1)


@settings(max_examples=300, deadline=None)
@given(
    a=st.tuples(OFFSETS, st.integers(1, 10**9), st.integers(0, 9)),
    b=st.tuples(OFFSETS, st.integers(1, 10**9), st.integers(0, 9)),
)
def test_bucketed_chunk_keys_sort_as_their_offsets(a, b) -> None:
    ka, kb = (L.chunk_key("c", "b", "n", s, s + n, e) for s, n, e in (a, b))
    assert (ka < kb) == ((a[0], a[0] + a[1]) < (b[0], b[0] + b[1])) or a[0] == b[0]
    p = L.parse_key(ka)
    assert (p.kind, p.start, p.end, p.epoch, p.flat) == ("chunk", a[0], a[0] + a[1], a[2], False)


@settings(max_examples=300, deadline=None)
@given(x=TIMES, y=TIMES)
def test_bucketed_time_keys_sort_as_their_times(x, y) -> None:
    sx, sy = (L.snapshot_key("c", "b", "n", t) for t in (x, y))
    assert (sx < sy) == (x < y)
    ex, ey = (L.event_key("c", "b", "n", t, "started") for t in (x, y))
    assert (ex < ey) == (x < y)
    assert L.parse_key(ex).at_ms == x and L.parse_key(sx).at_ms == x


def flat(key: str) -> str:
    """The same key as layout revision 1 wrote it (no bucket folders)."""
    parts = key.split("/")
    return "/".join(parts[:5] + parts[-1:])


@settings(max_examples=300, deadline=None)
@given(old=OFFSETS, new=OFFSETS, t_old=TIMES, t_new=TIMES)
def test_flat_keys_sort_before_later_bucketed_ones(old, new, t_old, t_new) -> None:
    """An archive written flat, then bucketed, lists in offset (time) order: a resumed listing
    (StartAfter) after any key misses nothing newer."""
    if new < old or t_new < t_old:
        return
    fk = flat(L.chunk_key("c", "b", "n", old, old + 1, 0))
    assert fk < L.chunk_key("c", "b", "n", new, new + 1, 0)
    fs = flat(L.snapshot_key("c", "b", "n", t_old))
    assert fs < L.snapshot_key("c", "b", "n", t_new)


def test_flat_keys_still_parse_and_say_so() -> None:
    key = L.chunk_key("c", "b", "n", 8192, 9000, 1)
    p = L.parse_key(flat(key))
    assert (p.kind, p.start, p.end, p.epoch, p.flat) == ("chunk", 8192, 9000, 1, True)
    e = L.parse_key(flat(L.event_key("c", "b", "n", 7, "truncated")))
    assert (e.kind, e.at_ms, e.event_kind, e.flat) == ("event", 7, "truncated", True)


def test_a_key_in_the_wrong_bucket_does_not_parse() -> None:
    key = L.chunk_key("c", "b", "n", 5_000_000, 5_000_100, 0)
    wrong = key.replace("00000000000005xxxxxx", "00000000000004xxxxxx")
    assert L.parse_key(wrong) is None and L.in_node_folder(wrong)
    snap = L.snapshot_key("c", "b", "n", 1_700_000_000_000)
    assert L.parse_key(snap.replace("17000xxxxxxxx/", "")) is None  # a level missing
    assert L.in_node_folder(snap) and not L.in_node_folder(L.audit_state_key("c", "b"))
