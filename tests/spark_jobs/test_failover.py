"""Per-epoch master pairing across a failover: each byte range is compared with the node that was
master in the epoch that wrote it; the old master's cut-off tail is ``extra``."""

from __future__ import annotations

import pytest

from broker.archive.shipper import NodeIdentity, Shipper
from broker.archive.sources import StoreDirSource
from contracts import archive_layout as layout
from spark_jobs.audit import AuditOptions, run_audit
from tests.spark_jobs.builder import (
    CLUSTER,
    GROUP,
    Archive,
    copy_store,
    grow_store,
    make_store,
    truncate_log,
)

BASE = ["pair", "start", "end", "verdict", "detail"]  # the ranges columns these tests judge


@pytest.fixture(scope="module")
def failover(tmp_path_factory):
    """a-0 master in epoch 0 writes 60 messages; a-1 had replicated 40 when a-0 died; a-1 is
    promoted (epoch 1) and writes 25 more; a-0 rejoins as a slave: truncates its 20-message
    tail and replicates epoch 1."""
    base = tmp_path_factory.mktemp("failover")
    old = make_store(base / "a0", 60)
    a1 = copy_store(base / "a0", base / "a1")
    cut = old[40].wrote_offset
    truncate_log(a1, cut)
    a1_epoch0 = copy_store(a1, base / "a1-epoch0")
    new = grow_store(a1, 25, already=500)  # other bodies: the new epoch's bytes differ
    rejoined = copy_store(a1, base / "a0-rejoined")
    return base, old, new, cut, a1_epoch0, a1, rejoined


def build(tmp_path, failover, ack: int) -> tuple[Archive, str]:
    base, old, new, cut, a1_epoch0, a1, rejoined = failover
    archive = Archive(tmp_path / "archive")
    archive.ship(base / "a0", "a-0", "SYNC_MASTER", 0, chunk=3000)
    archive.snapshot("a-0", "SYNC_MASTER", 1_000, slaves={"a-1": ack}, confirmOffset=ack)
    archive.ship(a1_epoch0, "a-1", "SLAVE", 1, chunk=5000)
    archive.event("a-1", "role_changed", 2_000, epoch=1, **{"from": "SLAVE", "to": "SYNC_MASTER"})
    Shipper(archive.store, NodeIdentity(CLUSTER, GROUP, "a-1", 0, "SYNC_MASTER", 1), 5000).ship(
        StoreDirSource.open(str(a1)), start=cut
    )
    archive.snapshot("a-1", "SYNC_MASTER", 3_000, epoch=1, slaves={"a-0": new[-1].end_offset})
    # a-0 rejoins: its tail [cut, old end) leaves the log, epoch 1 is replicated from a-1
    sh = Shipper(archive.store, NodeIdentity(CLUSTER, GROUP, "a-0", 1, "SLAVE", 0), 3000)
    sh.record_truncation(cut, 1)
    sh.ship(StoreDirSource.open(str(rejoined)), start=cut)
    return archive, layout.snapshot_name("a-0", 1_000)


def audit(spark, archive):
    opts = AuditOptions(spec=archive.spec, cluster=CLUSTER, broker_name=GROUP)
    return run_audit(spark, opts)["groupVerdicts"][0]


def ranges(v):
    return [(r["pair"], r["start"], r["end"], r["verdict"]) for r in v["findings"]["ranges"]]


def test_failover_with_a_clean_truncation_passes(spark, tmp_path, failover) -> None:
    _, old, new, cut, *_ = failover
    archive, _ = build(tmp_path, failover, ack=cut)
    v = audit(spark, archive)
    assert v["passed"], v
    assert v["master"] == "a-1"
    # epoch 0 is compared against a-0, epoch 1 against a-1; the old tail is an allowed extra
    assert ranges(v) == [("a-1->a-0", cut, old[-1].end_offset, "extra")]
    assert "not acknowledged (allowed)" in v["findings"]["ranges"][0]["detail"]
    assert v["counts"] == {"match": 2, "extra": 1}
    import pandas as pd

    table = pd.read_parquet(tmp_path / "archive" / "audits" / v["runId"] / GROUP / "ranges.parquet")
    rows = sorted(table[BASE].itertuples(index=False, name=None))
    assert [r[:4] for r in rows] == [
        ("a-0->a-1", 0, cut, "match"),
        ("a-1->a-0", cut, old[-1].end_offset, "extra"),
        ("a-1->a-0", cut, new[-1].end_offset, "match"),
    ]


def test_acknowledged_bytes_lost_in_the_truncation_fail(spark, tmp_path, failover) -> None:
    _, old, _, cut, *_ = failover
    acked = old[50].end_offset  # a-0 had acknowledged 10 messages a-1 never received
    archive, snapshot = build(tmp_path, failover, ack=acked)
    v = audit(spark, archive)
    assert not v["passed"]
    found = v["findings"]["acknowledged_durability"]
    assert [(f["kind"], f["lost_start"], f["lost_end"], f["snapshot"]) for f in found] == [
        ("acknowledged_bytes_truncated", cut, acked, snapshot)
    ]
    rc = next(c for c in v["checks"] if c["name"] == "replica_consistency")
    assert not rc["passed"] and rc["findings"] == 1
