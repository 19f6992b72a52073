"""Each verdict and check on an archive with a known fault, with exact offsets."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from spark_jobs.audit import AuditOptions, run_audit
from tests.spark_jobs import builder
from tests.spark_jobs.builder import Archive, copy_store, flip, make_store, truncate_log

BASE = ["pair", "start", "end", "verdict", "detail"]  # the ranges columns these tests judge


@pytest.fixture(scope="module")
def master_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("master") / "store"
    results = make_store(path, 60)
    return path, results


def audit(spark, archive: Archive, **kw):
    opts = AuditOptions(spec=archive.spec, cluster="c1", broker_name="broker-a", **kw)
    return run_audit(spark, opts)["groupVerdicts"][0]


def check(verdict: dict, name: str) -> dict:
    return next(c for c in verdict["checks"] if c["name"] == name)


def pair_archive(tmp_path, master_store, slave_dir=None) -> Archive:
    path, _ = master_store
    return builder.pair_archive(tmp_path / "archive", path, slave_dir or path)


def test_clean_pair_matches_everywhere(spark, tmp_path, master_store) -> None:
    _, results = master_store
    archive = pair_archive(tmp_path, master_store)
    v = audit(spark, archive)
    assert v["passed"], v
    assert v["counts"] == {"match": 1}
    ranges = pd.read_parquet(
        tmp_path / "archive" / "audits" / v["runId"] / "broker-a" / "ranges.parquet"
    )
    assert list(ranges[BASE].itertuples(index=False, name=None)) == [
        ("a-0->a-1", 0, results[-1].end_offset, "match", "")
    ]
    top = json.loads((tmp_path / "archive" / "audits" / v["runId"] / "verdict.json").read_text())
    assert top["passed"] and top["brokerName"] == "broker-a"
    assert check(v, "log_integrity")["detail"].startswith(f"{2 * (60 + 2)}")  # 2 BLANKs per node


def test_flipped_byte_on_the_slave_is_divergent_at_that_offset(spark, tmp_path, master_store):
    path, results = master_store
    slave = copy_store(path, tmp_path / "slave")
    target = results[25]
    # inside the body: the record's last 36 bytes are its topic, TAGS and the record CRC
    # property (``__CRC32#``, 20 bytes); 30 bytes before the body's end, so that the 64-byte
    # witness window either side stays in this record (the compared sub-range ends with it)
    flip_at = target.wrote_offset + target.wrote_bytes - 66
    flip(slave, flip_at)
    v = audit(spark, pair_archive(tmp_path, master_store, slave))
    assert not v["passed"]
    div = [r for r in v["findings"]["ranges"] if r["verdict"] == "divergent"]
    assert len(div) == 1 and div[0]["start"] == flip_at
    detail = json.loads(div[0]["detail"])
    assert detail["firstDifferingOffset"] == flip_at
    assert detail["master"]["offset"] == detail["slave"]["offset"] == target.wrote_offset
    assert detail["master"]["queueOffset"] == target.queue_offset
    assert detail["master"]["msgId"] == target.msg_id and detail["slave"]["crcOk"] is False
    # the witness counts differing bytes (one), not the range's length, and carries both
    # replicas' bytes around the first one (spark_jobs/witness.py)
    assert detail["differingBytes"] == 1 < div[0]["end"] - div[0]["start"]
    w = detail["window"]
    m_bytes, s_bytes = bytes.fromhex(w["master"]), bytes.fromhex(w["slave"])
    assert len(m_bytes) == len(s_bytes) == 2 * 64 and w["start"] == flip_at - 64
    assert [k for k in range(len(m_bytes)) if m_bytes[k] != s_bytes[k]] == [64]
    issues = v["findings"]["records_issues"]
    assert [(i["node"], i["offset"], i["check"]) for i in issues] == [
        ("a-1", target.wrote_offset, "crc_mismatch")
    ]


def test_corruption_replicated_to_both_sides_fails_crc_not_replica(spark, tmp_path, master_store):
    path, results = master_store
    both = copy_store(path, tmp_path / "both")
    target = results[10]
    flip(both, target.wrote_offset + target.wrote_bytes - 40)
    v = audit(spark, builder.pair_archive(tmp_path / "archive", both, both))
    assert check(v, "replica_consistency")["passed"]
    assert not check(v, "log_integrity")["passed"]
    offsets = sorted((i["node"], i["offset"]) for i in v["findings"]["records_issues"])
    assert offsets == [("a-0", target.wrote_offset), ("a-1", target.wrote_offset)]


def test_missing_chunk_is_reported_with_its_range(spark, tmp_path, master_store) -> None:
    archive = pair_archive(tmp_path, master_store)
    mans = sorted(
        o.key
        for o in archive.store.list("v1/c1/broker-a/a-1/commitlog/")
        if o.key.endswith(".json")
    )
    victim = mans[1]
    start, end = (int(x) for x in victim.rsplit("/", 1)[1].split("-")[:2])
    archive.store.delete(victim)
    archive.store.delete(victim[:-5] + ".log")
    v = audit(spark, archive)
    missing = [r for r in v["findings"]["ranges"] if r["verdict"] == "missing"]
    assert [(r["start"], r["end"]) for r in missing] == [(start, end)]
    assert not v["passed"]


def test_lagging_slave_is_lag_within_the_limit(spark, tmp_path, master_store) -> None:
    path, results = master_store
    slave = copy_store(path, tmp_path / "slave")
    cut = results[40].wrote_offset
    truncate_log(slave, cut)
    archive = pair_archive(tmp_path, master_store, slave)
    v = audit(spark, archive)
    lag = [r for r in v["findings"]["ranges"] if r["verdict"] == "lag"]
    assert [(r["start"], r["end"]) for r in lag] == [(cut, results[-1].end_offset)]
    assert v["passed"]
    tight = audit(spark, archive, max_lag_bytes=100)
    assert not check(tight, "replica_consistency")["passed"]


def test_acknowledged_bytes_missing_on_the_slave(spark, tmp_path, master_store) -> None:
    path, results = master_store
    slave = copy_store(path, tmp_path / "slave")
    cut = results[40].wrote_offset
    truncate_log(slave, cut)
    archive = pair_archive(tmp_path, master_store, slave)
    promised = results[50].end_offset
    archive.snapshot("a-0", "SYNC_MASTER", 5_000, slaves={"a-1": promised}, confirmOffset=promised)
    v = audit(spark, archive)
    found = v["findings"]["acknowledged_durability"]
    assert [(f["kind"], f["lost_start"], f["lost_end"]) for f in found] == [
        ("ack_not_on_slave", cut, promised)
    ]
    assert found[0]["snapshot"] == "a-0/snapshots/000xxxxxxxxxx/00000xxxxxxxx/0000000005000.json"
    assert not v["passed"]


def test_a_finding_names_the_snapshot_key_as_listed_in_a_flat_archive(
    spark, tmp_path, master_store
) -> None:
    """An archive written by layout revision 1 holds snapshots without bucket folders; the
    finding must name the object that is there, not the key revision 2 would have written."""
    path, results = master_store
    slave = copy_store(path, tmp_path / "slave")
    truncate_log(slave, results[40].wrote_offset)
    archive = pair_archive(tmp_path, master_store, slave)
    promised = results[50].end_offset
    archive.snapshot("a-0", "SYNC_MASTER", 5_000, slaves={"a-1": promised}, confirmOffset=promised)
    bucketed = next(o.key for o in archive.store.list("v1/c1/broker-a/a-0/snapshots/"))
    flat = "v1/c1/broker-a/a-0/snapshots/0000000005000.json"
    archive.store.put(flat, archive.store.get(bucketed))
    archive.store.delete(bucketed)
    v = audit(spark, archive)
    found = v["findings"]["acknowledged_durability"]
    assert [f["snapshot"] for f in found] == ["a-0/snapshots/0000000005000.json"]
    assert archive.store.get("v1/c1/broker-a/" + found[0]["snapshot"])  # the object named exists
    assert not v["passed"]


def test_truncation_of_acknowledged_bytes_is_data_loss(spark, tmp_path, master_store) -> None:
    path, results = master_store
    archive = pair_archive(tmp_path, master_store)
    acked = results[30].end_offset
    archive.snapshot("a-0", "SYNC_MASTER", 1_000, slaves={"a-1": acked}, confirmOffset=acked)
    # a clean truncation above every acknowledged byte is fine ...
    archive.event(
        "a-1", "truncated", 2_000, epoch=1, **{"from": results[-1].end_offset, "to": acked}
    )
    assert check(audit(spark, archive), "acknowledged_durability")["passed"]
    # ... one below the acknowledged offset lost data
    lost_to = results[20].wrote_offset
    archive.event("a-1", "truncated", 3_000, epoch=1, **{"from": acked, "to": lost_to})
    v = audit(spark, archive)
    found = [
        f
        for f in v["findings"]["acknowledged_durability"]
        if f["kind"] == "acknowledged_bytes_truncated"
    ]
    assert [(f["lost_start"], f["lost_end"]) for f in found] == [(lost_to, acked)]


def test_offset_regression_with_and_without_reset(spark, tmp_path, master_store) -> None:
    archive = pair_archive(tmp_path, master_store)
    qmax = {"orders": {"0": 30, "1": 30}}
    archive.snapshot(
        "a-0", "SYNC_MASTER", 1_000, consumerOffsets={"orders@g1": {"0": 20}}, queueMaxOffsets=qmax
    )
    archive.event("a-0", "role_changed", 1_500, epoch=1, **{"from": "SYNC_MASTER", "to": "SLAVE"})
    archive.snapshot(
        "a-1",
        "SYNC_MASTER",
        2_000,
        epoch=1,
        consumerOffsets={"orders@g1": {"0": 12}},
        queueMaxOffsets=qmax,
    )
    v = audit(spark, archive)
    viol = v["findings"]["offset_violations"]
    assert len(viol) == 1
    r = viol[0]
    assert (r["kind"], r["before"], r["after"], r["reconsumed_messages"]) == (
        "regression",
        20,
        12,
        8,
    )
    assert (r["node_before"], r["node_after"], r["epoch_before"], r["epoch_after"]) == (
        "a-0",
        "a-1",
        0,
        1,
    )
    assert "a-0 SYNC_MASTER->SLAVE" in r["failover"]
    # a recorded admin reset between the two snapshots makes it legitimate
    archive.event(
        "a-1",
        "offset_reset",
        1_800,
        epoch=1,
        group="g1",
        topic="orders",
        queue=0,
        **{"from": 20, "to": 12},
    )
    assert check(audit(spark, archive), "offset_monotonicity")["passed"]


def test_offset_loss_accepted_at_start_excuses_every_queue(spark, tmp_path, master_store) -> None:
    """A node started with --accept-offset-loss archives an offset_reset for every group,
    topic and queue ("*", -1): the regression it causes is recorded, not a violation."""
    archive = pair_archive(tmp_path, master_store)
    qmax = {"orders": {"0": 30, "1": 30}}
    archive.snapshot(
        "a-0", "SYNC_MASTER", 1_000, consumerOffsets={"orders@g1": {"0": 20}}, queueMaxOffsets=qmax
    )
    archive.snapshot(
        "a-0", "SYNC_MASTER", 2_000, consumerOffsets={"orders@g1": {"0": 0}}, queueMaxOffsets=qmax
    )
    assert not check(audit(spark, archive), "offset_monotonicity")["passed"]
    archive.event(
        "a-0", "offset_reset", 1_500, group="*", topic="*", queue=-1, **{"from": -1, "to": -1}
    )
    assert check(audit(spark, archive), "offset_monotonicity")["passed"]


def test_offset_beyond_queue_max(spark, tmp_path, master_store) -> None:
    archive = pair_archive(tmp_path, master_store)
    archive.snapshot(
        "a-0",
        "SYNC_MASTER",
        1_000,
        consumerOffsets={"orders@g1": {"1": 31}},
        queueMaxOffsets={"orders": {"1": 30}},
    )
    v = audit(spark, archive)
    viol = v["findings"]["offset_violations"]
    assert [(r["kind"], r["queue_id"], r["before"], r["after"]) for r in viol] == [
        ("beyond_queue_max", 1, 30, 31)
    ]


def test_queue_offset_gap(spark, tmp_path) -> None:
    results = make_store(tmp_path / "gap", 20, queues=1, gap_after=13)
    archive = Archive(tmp_path / "archive")
    archive.ship(tmp_path / "gap", "a-0", "SYNC_MASTER", 0, chunk=100_000)
    v = audit(spark, archive)
    issues = v["findings"]["records_issues"]
    assert [(i["offset"], i["check"]) for i in issues] == [
        (results[13].wrote_offset, "queue_offset_gap")
    ]
    assert "expected queue offset 13, found 14" in issues[0]["detail"]


def test_queue_offset_gap_across_chunks(spark, tmp_path) -> None:
    results = make_store(tmp_path / "gap", 20, queues=1, gap_after=13)
    archive = Archive(tmp_path / "archive")
    # cut chunks exactly at the gap so only the cross-chunk window can see it
    archive.ship(tmp_path / "gap", "a-0", "SYNC_MASTER", 0, chunk=results[13].wrote_offset)
    v = audit(spark, archive)
    assert [i["check"] for i in v["findings"]["records_issues"]] == ["queue_offset_gap"]


def test_audit_reads_s3_over_http_with_credentials_kept_out_of_the_verdict(
    spark, tmp_path, master_store, s3_server
) -> None:
    from broker.archive.shipper import NodeIdentity, Shipper
    from broker.archive.sources import StoreDirSource
    from contracts.object_store import StoreSpec, open_store

    path, results = master_store
    s3_server.create_bucket("audit-s3")
    opts = s3_server.store_options()
    store = open_store("s3://audit-s3/x", **opts)
    for node, role, bid, chunk in (("a-0", "SYNC_MASTER", 0, 3000), ("a-1", "SLAVE", 1, 7000)):
        Shipper(store, NodeIdentity("c1", "broker-a", node, bid, role), chunk).ship(
            StoreDirSource.open(str(path))
        )
    spec = StoreSpec("s3://audit-s3/x", **opts)
    summary = run_audit(spark, AuditOptions(spec=spec, cluster="c1", run_id="s3run"))
    assert summary["passed"] and summary["counts"] == {"match": 1}
    raw = store.get("audits/s3run/verdict.json").decode()
    assert opts["secret_key"] not in raw and opts["access_key"] not in raw
    import io

    ranges = pd.read_parquet(io.BytesIO(store.get("audits/s3run/broker-a/ranges.parquet")))
    assert list(ranges[BASE].itertuples(index=False, name=None)) == [
        ("a-0->a-1", 0, results[-1].end_offset, "match", "")
    ]
