"""Archive layout v1 keys and documents (DESIGN.md section 3)."""

from __future__ import annotations

import json

import pytest

from contracts import archive_layout as L


def test_chunk_key_is_zero_padded_and_sortable() -> None:
    key = L.chunk_key("c1", "broker-a", "broker-a-0", 0, 8192, 0)
    assert key == (
        "v1/c1/broker-a/broker-a-0/commitlog/00000000000000000000-00000000000000008192-0.log"
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
    assert L.snapshot_key("c", "b", "n", 42).endswith("/snapshots/0000000000042.json")


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
