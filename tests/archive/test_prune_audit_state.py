"""Prune reads only what a passing audit verified, through contracts.audit_state (v1 and v2)."""

from __future__ import annotations

import json

import pytest

from broker.archive import retention
from contracts import archive_layout as layout
from contracts.errors import ArchiveError
from tests.spark_jobs.builder import Archive, make_store

FAR_FUTURE_MS = 4_000_000_000_000


def _manifests(archive: Archive, node: str) -> list[dict]:
    keys = [o.key for o in archive.store.list(f"v1/c1/broker-a/{node}/commitlog/")]
    return [json.loads(archive.store.get(k)) for k in keys if k.endswith(".json")]


@pytest.fixture
def archive(tmp_path) -> Archive:
    make_store(tmp_path / "m", 40)
    out = Archive(tmp_path / "archive")
    out.ship(tmp_path / "m", "a-0", "SYNC_MASTER", 0, chunk=3000)
    return out


@pytest.mark.parametrize("version", [1, 2])
def test_prunes_up_to_the_verified_end_of_either_version(archive, version) -> None:
    before = _manifests(archive, "a-0")
    assert len(before) >= 3
    doc = {"version": version, "verified": {"a-0": before[1]["end"]}, "lastSnapshotAt": -1}
    archive.store.put_mutable(layout.audit_state_key("c1", "broker-a"), json.dumps(doc).encode())
    res = retention.prune_group(
        archive.store, "c1", "broker-a", FAR_FUTURE_MS - 1, now_ms=FAR_FUTURE_MS
    )
    after = _manifests(archive, "a-0")
    assert [m["end"] for m in after] == [m["end"] for m in before[2:]]
    assert res.deleted == 4 and res.kept_unaudited == 1


def test_an_unknown_state_version_is_refused_naming_the_key(archive) -> None:
    key = layout.audit_state_key("c1", "broker-a")
    archive.store.put_mutable(key, json.dumps({"version": 9, "verified": {"a-0": 1}}).encode())
    with pytest.raises(ArchiveError, match=r"state\.json: unreadable audit state: unknown state"):
        retention.prune_group(archive.store, "c1", "broker-a", 1, now_ms=2)
    assert len(_manifests(archive, "a-0")) >= 3  # nothing deleted
