"""Retention: ``haproof archive prune --before T`` and history before the horizon as ``expired``."""

from __future__ import annotations

import json

from broker.archive import retention
from broker.cli import main
from contracts import archive_layout as layout
from spark_jobs.audit import AuditOptions, run_audit
from tests.spark_jobs.builder import Archive, make_store


def audit(spark, archive: Archive, incremental: bool = False):
    opts = AuditOptions(
        spec=archive.spec, cluster="c1", broker_name="broker-a", incremental=incremental
    )
    return run_audit(spark, opts)["groupVerdicts"][0]


def chunk_keys(archive: Archive, node: str) -> list[str]:
    return [o.key for o in archive.store.list(f"v1/c1/broker-a/{node}/commitlog/")]


def test_prune_deletes_old_history_and_the_audit_calls_it_expired(spark, tmp_path) -> None:
    path = tmp_path / "m"
    make_store(path, 60)
    archive = Archive(tmp_path / "archive")
    archive.ship(path, "a-0", "SYNC_MASTER", 0, chunk=3000)
    archive.ship(path, "a-1", "SLAVE", 1, chunk=5000)
    for at in (1_000, 2_000_000_000_000):
        archive.snapshot("a-0", "SYNC_MASTER", at, consumerOffsets={"orders@g": {"0": 5}})
    manifests = [
        json.loads(archive.store.get(k)) for k in chunk_keys(archive, "a-0") if k.endswith(".json")
    ]
    before_ms = manifests[1]["lastStoreTs"] + 1  # the first two master chunks are older
    # no audit yet: nothing unverified is pruned
    res = retention.prune_group(archive.store, "c1", "broker-a", before_ms)
    assert res.kept_unaudited >= 3 and len(chunk_keys(archive, "a-0")) == 2 * len(manifests)
    snaps = [o.key for o in archive.store.list("v1/c1/broker-a/a-0/snapshots/")]
    assert len(snaps) == 2  # the old snapshot too: no audit judged it yet
    assert audit(spark, archive)["passed"]
    n_master, n_slave = len(chunk_keys(archive, "a-0")), len(chunk_keys(archive, "a-1"))
    rc = main(
        [
            "archive",
            "prune",
            "--root",
            archive.root,
            "--cluster",
            "c1",
            "--broker-name",
            "broker-a",
            "--before",
            str(before_ms),
        ]
    )
    assert rc == 0
    assert len(chunk_keys(archive, "a-0")) == n_master - 4  # two chunks: log and manifest
    assert len(chunk_keys(archive, "a-1")) < n_slave
    marker = json.loads(archive.store.get("v1/c1/broker-a/_retention.json"))
    assert marker["before"] == before_ms
    assert marker["nodes"]["a-0"]["expiredBelow"] == manifests[1]["end"]
    snaps = [o.key for o in archive.store.list("v1/c1/broker-a/a-0/snapshots/")]
    assert snaps == [layout.snapshot_key("c1", "broker-a", "a-0", 2_000_000_000_000)]
    v = audit(spark, archive)
    assert v["passed"], v["findings"]
    assert "missing" not in v["counts"] and "unverifiable" not in v["counts"]
    expired = [r for r in v["findings"]["ranges"] if r["verdict"] == "expired"]
    assert expired and expired[0]["start"] == 0
    assert (
        max(r["end"] for r in expired)
        == max(marker["nodes"].values(), key=lambda n: n["expiredBelow"])["expiredBelow"]
    )
    assert v["counts"]["match"] >= 1


def test_prune_refuses_a_bad_time_and_a_future_one(tmp_path, capsys) -> None:
    archive = Archive(tmp_path / "archive")
    base = ["archive", "prune", "--root", archive.root, "--cluster", "c1"]
    assert main([*base, "--before", "yesterday"]) == 2
    assert "--before" in capsys.readouterr().err
    assert main([*base, "--before", "2026-01-01T00:00:00"]) == 2  # no zone
    assert main([*base, "--before", "2026-01-01T00:00:00Z"]) == 2  # no such cluster
    assert "no cluster" in capsys.readouterr().err
