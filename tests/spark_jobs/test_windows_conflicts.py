"""``--since/--until`` windows and archive conflicts, with exact ranges."""

from __future__ import annotations

import json

import pandas as pd

from broker.archive.shipper import NodeIdentity, Shipper
from broker.archive.sources import StoreDirSource
from spark_jobs.audit import AuditOptions, run_audit
from tests.spark_jobs.builder import CLUSTER, GROUP, Archive, copy_store, flip, make_store

BASE = ["pair", "start", "end", "verdict", "detail"]  # the ranges columns these tests judge


def manifests(archive: Archive, node: str) -> list[dict]:
    keys = sorted(
        o.key
        for o in archive.store.list(f"v1/{CLUSTER}/{GROUP}/{node}/commitlog/")
        if o.key.endswith(".json")
    )
    return [json.loads(archive.store.get(k)) for k in keys]


def test_since_until_window_includes_exactly_the_chunks_inside(spark, tmp_path) -> None:
    make_store(tmp_path / "m", 60)
    archive = Archive(tmp_path / "archive")
    archive.ship(tmp_path / "m", "a-0", "SYNC_MASTER", 0, chunk=2000)
    archive.ship(tmp_path / "m", "a-1", "SLAVE", 1, chunk=2000)
    chunks = manifests(archive, "a-0")
    assert len(chunks) >= 5
    inside = chunks[1:4]
    since, until = inside[0]["firstStoreTs"], inside[-1]["lastStoreTs"]
    assert chunks[0]["lastStoreTs"] < since and chunks[4]["firstStoreTs"] > until
    # a regression between a snapshot before the window and one inside it
    archive.snapshot("a-0", "SYNC_MASTER", since - 1, consumerOffsets={"orders@g": {"0": 25}})
    archive.snapshot("a-0", "SYNC_MASTER", until, consumerOffsets={"orders@g": {"0": 20}})
    opts = AuditOptions(
        spec=archive.spec,
        cluster=CLUSTER,
        broker_name=GROUP,
        since_ms=since,
        until_ms=until,
        run_id="win",
    )
    v = run_audit(spark, opts)["groupVerdicts"][0]
    assert v["passed"], v["findings"]
    assert v["window"] == {"since": since, "until": until}
    assert v["recordsChecked"] == 2 * sum(c["records"] for c in inside)
    ranges = pd.read_parquet(tmp_path / "archive" / "audits" / "win" / GROUP / "ranges.parquet")
    assert list(ranges[BASE].itertuples(index=False, name=None)) == [
        ("a-0->a-1", inside[0]["start"], inside[-1]["end"], "match", "")
    ]
    timeline = pd.read_parquet(
        tmp_path / "archive" / "audits" / "win" / GROUP / "offset_timeline.parquet"
    )
    assert list(timeline["taken_at"]) == [until]  # the snapshot before the window is out
    # without the window, the same archive shows the regression
    whole = run_audit(spark, AuditOptions(spec=archive.spec, cluster=CLUSTER, broker_name=GROUP))
    viol = whole["groupVerdicts"][0]["findings"]["offset_violations"]
    assert [(r["before"], r["after"]) for r in viol] == [(25, 20)]


def test_two_chunks_of_one_epoch_with_different_bytes_are_a_conflict(spark, tmp_path) -> None:
    results = make_store(tmp_path / "m", 30)
    other = copy_store(tmp_path / "m", tmp_path / "other")
    target = results[12]
    flip_at = target.wrote_offset + target.wrote_bytes - 25
    flip(other, flip_at)
    archive = Archive(tmp_path / "archive")
    archive.ship(tmp_path / "m", "a-0", "SYNC_MASTER", 0, chunk=3000)
    # the same node and epoch uploads the same offsets again, cut differently, other bytes
    Shipper(archive.store, NodeIdentity(CLUSTER, GROUP, "a-0", 0, "SYNC_MASTER", 0), 5000).ship(
        StoreDirSource.open(str(other)), start=0
    )
    v = run_audit(spark, AuditOptions(spec=archive.spec, cluster=CLUSTER, broker_name=GROUP))
    v = v["groupVerdicts"][0]
    assert not v["passed"]
    conflicts = [r for r in v["findings"]["ranges"] if r["verdict"] == "conflict"]
    assert [(r["pair"], r["start"]) for r in conflicts] == [("a-0->a-0", flip_at)]
    assert json.loads(conflicts[0]["detail"])["firstDifferingOffset"] == flip_at
    assert v["counts"]["conflict"] == 1
    assert not next(c for c in v["checks"] if c["name"] == "replica_consistency")["passed"]


def test_identical_overlapping_chunks_are_no_finding(spark, tmp_path) -> None:
    make_store(tmp_path / "m", 30)
    archive = Archive(tmp_path / "archive")
    archive.ship(tmp_path / "m", "a-0", "SYNC_MASTER", 0, chunk=3000)
    Shipper(archive.store, NodeIdentity(CLUSTER, GROUP, "a-0", 0, "SYNC_MASTER", 0), 5000).ship(
        StoreDirSource.open(str(tmp_path / "m")), start=0
    )
    v = run_audit(spark, AuditOptions(spec=archive.spec, cluster=CLUSTER, broker_name=GROUP))
    v = v["groupVerdicts"][0]
    assert v["passed"] and v["counts"] == {}, v["findings"]


def test_replica_windows_end_on_master_chunk_boundaries() -> None:
    from spark_jobs.views import split_windows

    m = [{"start": 0, "end": 60}, {"start": 60, "end": 130}, {"start": 130, "end": 300}]
    assert split_windows(m, 0, 300, 100) == [(0, 60), (60, 130), (130, 230), (230, 300)]
    assert split_windows(m, 10, 250, 64) == [
        (10, 60),
        (60, 124),
        (124, 130),
        (130, 194),
        (194, 250),
    ]
    assert split_windows([], 0, 250, 100) == [(0, 100), (100, 200), (200, 250)]
