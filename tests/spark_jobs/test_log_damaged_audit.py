"""A slave whose log is damaged mid-way: its archive ends at the damage, which the shipper
recorded (``log_damaged``). The audit fails log integrity naming the group, the node, the offset
and the reason, with how much of the node's log the comparison covered; without the event (what
the archive held before the event existed) the same archive passes as a slave that lags."""

from __future__ import annotations

import pytest

from contracts import archive_layout as layout
from spark_jobs.audit import AuditOptions, run_audit
from tests.spark_jobs.builder import (
    CLUSTER,
    FILE_SIZE,
    Archive,
    copy_store,
    make_store,
    pair_archive,
)


@pytest.fixture(scope="module")
def master_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("master") / "store"
    return path, make_store(path, 60)


def audit(spark, archive: Archive) -> dict:
    opts = AuditOptions(spec=archive.spec, cluster=CLUSTER, broker_name="broker-a")
    return run_audit(spark, opts)["groupVerdicts"][0]


def check(verdict: dict, name: str) -> dict:
    return next(c for c in verdict["checks"] if c["name"] == name)


def damaged_pair(tmp_path, master_store) -> tuple[Archive, int, int]:
    """Master a-0 whole; slave a-1 with a bad magic code at record 30: (archive, damaged
    offset, the master's log end)."""
    path, results = master_store
    slave = copy_store(path, tmp_path / "slave")
    damaged = results[30].wrote_offset
    f = slave / "commitlog" / f"{damaged - damaged % FILE_SIZE:020d}"
    data = bytearray(f.read_bytes())
    data[damaged % FILE_SIZE + 4 : damaged % FILE_SIZE + 8] = b"\x00\x00\x00\x07"
    f.write_bytes(bytes(data))
    archive = Archive(tmp_path / "archive")
    archive.ship(path, "a-0", "SYNC_MASTER", 0, chunk=3000)
    shipped = archive.ship(slave, "a-1", "SLAVE", 1, chunk=5000)
    assert shipped.end == damaged and shipped.damage_event is not None
    return archive, damaged, results[-1].end_offset


def test_a_slave_damaged_mid_log_fails_log_integrity_naming_node_and_offset(
    spark, tmp_path, master_store
) -> None:
    archive, damaged, end = damaged_pair(tmp_path, master_store)
    v = audit(spark, archive)
    assert not v["passed"] and v["status"] == "FAILED"
    assert not check(v, "log_integrity")["passed"]
    [issue] = v["findings"]["records_issues"]
    assert (issue["node"], issue["offset"], issue["check"]) == ("a-1", damaged, "log_damaged")
    assert "magic" in issue["found"] and issue["key"].endswith("-log_damaged.json")
    detail = issue["detail"]
    assert "group broker-a, node a-1" in detail and f"damaged at offset {damaged}" in detail
    assert f"holds [0, {damaged}) of its log" in detail
    assert f"covered {damaged} byte(s) of it, up to offset {damaged}" in detail
    # the comparison itself is judged as before: the prefix matched (above), the rest is lag
    ranges = [(r["verdict"], r["start"], r["end"]) for r in v["findings"]["ranges"]]
    assert ranges == [("lag", damaged, end)]
    assert check(v, "replica_consistency")["passed"]


def test_without_the_event_the_same_archive_passes_as_a_lagging_slave(
    spark, tmp_path, master_store
) -> None:
    # what the archive held before shipping recorded damage: the audit cannot tell a damaged
    # log from a slave that lags, and passes
    archive, damaged, end = damaged_pair(tmp_path, master_store)
    prefix = layout.node_prefix(CLUSTER, "broker-a", "a-1") + layout.EVENTS
    [key] = [o.key for o in archive.store.list(prefix) if o.key.endswith("-log_damaged.json")]
    archive.store.delete(key)
    v = audit(spark, archive)
    assert v["passed"], v["checks"]
    assert v["findings"]["records_issues"] == []
    lag = [(r["start"], r["end"]) for r in v["findings"]["ranges"] if r["verdict"] == "lag"]
    assert lag == [(damaged, end)]


def test_a_flipped_property_byte_is_caught_by_the_record_crc(spark, tmp_path, master_store):
    # our broker's records end with TAGS and the record CRC property (``__CRC32#``, 20 bytes):
    # a flip in the TAGS value, on both replicas (so they still match), is outside the body
    # CRC; before the walk read the property, the audit passed it
    path, results = master_store
    both = copy_store(path, tmp_path / "both")
    target = results[17]
    at = target.wrote_offset + target.wrote_bytes - 22  # TAGS's value, before \x02__CRC32#...
    f = both / "commitlog" / f"{at - at % FILE_SIZE:020d}"
    data = bytearray(f.read_bytes())
    assert data[at % FILE_SIZE : at % FILE_SIZE + 3] == b"t\x02_"
    data[at % FILE_SIZE] ^= 0x01
    f.write_bytes(bytes(data))
    v = audit(spark, pair_archive(tmp_path / "archive", both, both))
    assert check(v, "replica_consistency")["passed"]
    assert not check(v, "log_integrity")["passed"]
    issues = [(i["node"], i["offset"], i["check"]) for i in v["findings"]["records_issues"]]
    assert issues == [(n, target.wrote_offset, "record_crc_mismatch") for n in ("a-0", "a-1")]
