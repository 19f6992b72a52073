"""Incremental audits: only what is new since the verified watermarks; state moves on a pass."""

from __future__ import annotations

import json

from spark_jobs.audit import AuditOptions, run_audit
from tests.spark_jobs.builder import Archive, copy_store, flip, grow_store, make_store


def audit(spark, archive: Archive, incremental: bool):
    opts = AuditOptions(
        spec=archive.spec, cluster="c1", broker_name="broker-a", incremental=incremental
    )
    return run_audit(spark, opts)["groupVerdicts"][0]


def state(archive: Archive) -> dict:
    return json.loads(archive.store.get("v1/c1/broker-a/_audit/state.json"))


def ship_pair(archive: Archive, path) -> None:
    archive.ship(path, "a-0", "SYNC_MASTER", 0, chunk=3000)
    archive.ship(path, "a-1", "SLAVE", 1, chunk=5000)


def test_incremental_checks_only_new_data_and_state_moves_on_pass(spark, tmp_path) -> None:
    path = tmp_path / "m"
    first = make_store(path, 40)
    archive = Archive(tmp_path / "archive")
    ship_pair(archive, path)
    archive.snapshot("a-0", "SYNC_MASTER", 1_000, consumerOffsets={"orders@g": {"0": 15}})
    full = audit(spark, archive, incremental=False)
    assert full["passed"]
    end1 = first[-1].end_offset
    assert state(archive)["verified"] == {"a-0": end1, "a-1": end1}
    after_full = archive.store.get("v1/c1/broker-a/_audit/state.json")
    # nothing new: nothing read, and the state is not rewritten (it still names the full run)
    idle = audit(spark, archive, incremental=True)
    assert idle["passed"] and idle["recordsChecked"] == 0 and idle["counts"] == {}
    assert archive.store.get("v1/c1/broker-a/_audit/state.json") == after_full
    # new data: only the new chunks (plus the last verified one per node) are checked
    more = grow_store(path, 30, already=40)
    ship_pair(archive, path)
    nxt = audit(spark, archive, incremental=True)
    assert nxt["passed"]
    assert 0 < nxt["recordsChecked"] < full["recordsChecked"] + 2 * 30
    matched = [r for r in nxt["findings"]["ranges"]]
    assert matched == []  # every compared range matched ...
    assert nxt["counts"] == {"match": 1}  # ... and it is one range from the watermark
    assert state(archive)["verified"]["a-0"] == more[-1].end_offset
    assert state(archive)["runId"] != json.loads(after_full)["runId"]  # new data: a new state
    # an offset regression across runs is still caught through the recorded point
    archive.snapshot("a-0", "SYNC_MASTER", 9_000, consumerOffsets={"orders@g": {"0": 9}})
    bad = audit(spark, archive, incremental=True)
    viol = bad["findings"]["offset_violations"]
    assert [(v["before"], v["after"]) for v in viol] == [(15, 9)]
    assert state(archive)["lastSnapshotAt"] == 1_000  # a failing run leaves the state alone


def test_failing_incremental_run_is_repeated_next_time(spark, tmp_path) -> None:
    path = tmp_path / "m"
    make_store(path, 30)
    archive = Archive(tmp_path / "archive")
    ship_pair(archive, path)
    assert audit(spark, archive, incremental=True)["passed"]
    before = state(archive)
    more = grow_store(path, 20, already=30)
    slave = copy_store(path, tmp_path / "s")
    target = more[10]
    flip(slave, target.wrote_offset + target.wrote_bytes - 20)
    archive.ship(path, "a-0", "SYNC_MASTER", 0, chunk=3000)
    archive.ship(slave, "a-1", "SLAVE", 1, chunk=5000)
    for _ in range(2):  # the same finding again: the watermark did not move past it
        v = audit(spark, archive, incremental=True)
        assert not v["passed"]
        div = [r for r in v["findings"]["ranges"] if r["verdict"] == "divergent"]
        assert div[0]["start"] == target.wrote_offset + target.wrote_bytes - 20
        assert state(archive) == before
