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


def shipped_pair(tmp_path, messages: int) -> tuple:
    """A master and a slave of ``messages`` messages, archived: (store path, archive)."""
    path = tmp_path / "m"
    make_store(path, messages)
    archive = Archive(tmp_path / "archive")
    ship_pair(archive, path)
    return path, archive


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


def _requests(archive: Archive) -> dict:
    from spark_jobs.archive_reader import executor_store

    return dict(executor_store(archive.spec).requests)


def _delta(before: dict, after: dict) -> dict:
    return {
        k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)
    }


def test_incremental_lists_and_reads_only_what_is_new(spark, tmp_path) -> None:
    path = tmp_path / "m"
    make_store(path, 40)
    archive = Archive(tmp_path / "archive")
    ship_pair(archive, path)
    for i in range(60):  # a long history of snapshots
        archive.snapshot("a-0", "SYNC_MASTER", 1_000 + i, consumerOffsets={"orders@g": {"0": i}})
    assert audit(spark, archive, incremental=True)["passed"]  # first run: lists everything
    size_after_60 = len(archive.store.get("v1/c1/broker-a/_audit/state.json"))
    r0 = _requests(archive)
    idle = audit(spark, archive, incremental=True)
    d = _delta(r0, _requests(archive))
    assert idle["passed"] and idle["recordsChecked"] == 0
    # nothing new: listed and read are only the state, the retention marker and, per node, the
    # chunk holding the group's verified end (its manifest and log), whatever the history's length
    assert d.get("keys_listed", 0) == 2 * 2, d
    assert d.get("get", 0) == 2 + 2, d
    for i in range(60, 63):
        archive.snapshot("a-0", "SYNC_MASTER", 1_000 + i, consumerOffsets={"orders@g": {"0": i}})
    r1 = _requests(archive)
    nxt = audit(spark, archive, incremental=True)
    d = _delta(r1, _requests(archive))
    assert nxt["passed"]
    assert d["keys_listed"] == 4 + 3 and d["get"] == 4 + 3, d  # and the three new snapshots
    st = state(archive)
    assert st["version"] == 2 and st["offsets"]["g@orders@0"]["committed"] == 62
    assert st["nodes"]["a-0"]["lastSnapshot"].endswith("/0000000001062.json")
    # bounded: the state does not grow with the snapshots read
    assert len(archive.store.get("v1/c1/broker-a/_audit/state.json")) <= size_after_60 + 64
    # a regression against the recorded point is still caught with the short listing
    archive.snapshot("a-0", "SYNC_MASTER", 5_000, consumerOffsets={"orders@g": {"0": 3}})
    bad = audit(spark, archive, incremental=True)
    assert [(v["before"], v["after"]) for v in bad["findings"]["offset_violations"]] == [(62, 3)]


def test_version_1_state_is_migrated_on_read(spark, tmp_path) -> None:
    path = tmp_path / "m"
    first = make_store(path, 30)
    archive = Archive(tmp_path / "archive")
    ship_pair(archive, path)
    archive.snapshot("a-0", "SYNC_MASTER", 1_000, consumerOffsets={"orders@g": {"0": 15}})
    end = first[-1].end_offset
    manifests = [
        o.key
        for o in archive.store.list("v1/c1/broker-a/a-0/commitlog/")
        if o.key.endswith(".json")
    ]
    v1 = {
        "version": 1,
        "verified": {"a-0": end, "a-1": end},
        "offsets": {"g@orders@0": {"committed": 15, "at": 1_000, "node": "a-0", "epoch": 0}},
        "lastSnapshotAt": 1_000,
        "maxAck": [0, 0, ""],
        "runId": "old-run",
        "objects": {
            k: {"whatever": 1}
            for k in manifests + ["v1/c1/broker-a/a-0/snapshots/0000000001000.json"]
        },
    }
    archive.store.put_mutable("v1/c1/broker-a/_audit/state.json", json.dumps(v1).encode())
    from spark_jobs.incremental import load_state

    st = load_state(archive.store, "c1", "broker-a")
    assert st.verified == {"a-0": end, "a-1": end} and st.run_id == "old-run"
    assert st.offsets["g@orders@0"]["committed"] == 15
    assert st.nodes["a-0"].last_snapshot.endswith("0000000001000.json")
    assert st.nodes["a-0"].last_chunk == max(manifests)[: -len(".json")] + ".log"
    # the migrated state drives an incremental run: nothing new, a regression still caught
    archive.snapshot("a-0", "SYNC_MASTER", 2_000, consumerOffsets={"orders@g": {"0": 9}})
    v = audit(spark, archive, incremental=True)
    assert [(x["before"], x["after"]) for x in v["findings"]["offset_violations"]] == [(15, 9)]
    assert v["recordsChecked"] == 0
    assert json.loads(archive.store.get("v1/c1/broker-a/_audit/state.json"))["version"] == 1


def test_a_reset_read_before_the_snapshot_after_it_still_excuses_the_rewind(
    spark, tmp_path
) -> None:
    path = tmp_path / "m"
    make_store(path, 30)
    archive = Archive(tmp_path / "archive")
    ship_pair(archive, path)
    archive.snapshot("a-0", "SYNC_MASTER", 1_000, consumerOffsets={"orders@g": {"0": 15}})
    assert audit(spark, archive, incremental=True)["passed"]
    # the admin rewinds the offset; a nightly run sees the event before any later snapshot
    archive.event(
        "a-0", "offset_reset", 1_500, group="g", topic="orders", queue=0, **{"from": 15, "to": 5}
    )
    assert audit(spark, archive, incremental=True)["passed"]
    archive.snapshot("a-0", "SYNC_MASTER", 2_000, consumerOffsets={"orders@g": {"0": 6}})
    v = audit(spark, archive, incremental=True)
    assert v["passed"], v["findings"]["offset_violations"]
    # without a reset, the same rewind is a regression
    archive.snapshot("a-0", "SYNC_MASTER", 3_000, consumerOffsets={"orders@g": {"0": 2}})
    bad = audit(spark, archive, incremental=True)
    assert [(x["before"], x["after"]) for x in bad["findings"]["offset_violations"]] == [(6, 2)]


def flatten(archive: Archive) -> int:
    """Move every object of the group's node folders to its layout revision 1 key (no bucket
    folders), as an archive written before revision 2 holds them."""
    moved = 0
    for info in list(archive.store.list("v1/c1/broker-a/")):
        parts = info.key.split("/")
        if len(parts) > 6 and parts[4] in ("commitlog", "snapshots", "events"):
            archive.store.put("/".join(parts[:5] + parts[-1:]), archive.store.get(info.key))
            archive.store.delete(info.key)
            moved += 1
    return moved


def test_an_archive_written_flat_then_bucketed_audits_in_order(spark, tmp_path) -> None:
    path, archive = shipped_pair(tmp_path, 40)
    archive.snapshot("a-0", "SYNC_MASTER", 1_000, consumerOffsets={"orders@g": {"0": 15}})
    assert flatten(archive) > 4
    full = audit(spark, archive, incremental=False)
    assert full["passed"] and full["counts"] == {"match": 1}
    # the shippers resume from the flat archive; what they add is bucketed
    more = grow_store(path, 30, already=40)
    ship_pair(archive, path)
    keys = [o.key for o in archive.store.list("v1/c1/broker-a/a-0/commitlog/")]
    assert any(k.count("/") == 5 for k in keys) and any(k.count("/") == 8 for k in keys)
    archive.snapshot("a-0", "SYNC_MASTER", 2_000, consumerOffsets={"orders@g": {"0": 20}})
    nxt = audit(spark, archive, incremental=True)
    assert nxt["passed"] and nxt["counts"] == {"match": 1}
    assert 0 < nxt["recordsChecked"] < full["recordsChecked"] + 2 * 30
    assert state(archive)["verified"]["a-0"] == more[-1].end_offset
    # a regression in the bucketed snapshots after the flat ones is still caught
    archive.snapshot("a-0", "SYNC_MASTER", 3_000, consumerOffsets={"orders@g": {"0": 9}})
    bad = audit(spark, archive, incremental=True)
    assert [(v["before"], v["after"]) for v in bad["findings"]["offset_violations"]] == [(20, 9)]


def test_an_object_in_a_wrong_bucket_is_an_archive_fault(spark, tmp_path) -> None:
    _path, archive = shipped_pair(tmp_path, 20)
    assert audit(spark, archive, incremental=False)["passed"]
    key = next(o.key for o in archive.store.list("v1/c1/broker-a/a-1/commitlog/"))
    misplaced = key.replace("/commitlog/", "/commitlog/99999999xxxxxxxxxxxx/", 1)
    archive.store.put(misplaced, archive.store.get(key))
    for incremental in (False, True):
        v = audit(spark, archive, incremental=incremental)
        faults = v["findings"]["archive_faults"]
        assert not v["passed"]
        assert [(f["kind"], f["key"]) for f in faults] == [("unknown_key", misplaced)]
