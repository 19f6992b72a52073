"""Archive faults are findings naming the object, never a crash; no PASS without evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from contracts import archive_layout as layout
from contracts import audit_tables as T
from spark_jobs.audit import AuditOptions, run_audit
from tests.spark_jobs.builder import CLUSTER, GROUP, Archive, copy_store, make_store


@pytest.fixture(scope="module")
def master_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("fmaster") / "store"
    return path, make_store(path, 60)


def audit(spark, archive: Archive, **kw) -> dict:
    opts = AuditOptions(spec=archive.spec, cluster=CLUSTER, broker_name=GROUP, **kw)
    return run_audit(spark, opts)["groupVerdicts"][0]


def status(v: dict, name: str) -> str:
    return next(c for c in v["checks"] if c["name"] == name)["status"]


def table(archive: Archive, v: dict, name: str) -> pd.DataFrame:
    path = Path(archive.root[len("file://") :]) / layout.audit_table_key(v["runId"], GROUP, name)
    return pd.read_parquet(path)


def pair(tmp_path, master_store, chunk=2048) -> tuple[Archive, list[dict], list[dict]]:
    path, _ = master_store
    archive = Archive(tmp_path / "archive")
    m = archive.ship(path, "a-0", "SYNC_MASTER", 0, chunk)
    s = archive.ship(copy_store(path, tmp_path / "slave"), "a-1", "SLAVE", 1, chunk + 512)
    return archive, m, s


def _obj(archive: Archive, key: str) -> Path:
    return Path(archive.root[len("file://") :]) / key


def _keys(archive: Archive, node: str) -> list[str]:
    prefix = layout.node_prefix(CLUSTER, GROUP, node) + "commitlog/"
    return sorted(o.key for o in archive.store.list(prefix) if o.key.endswith(".log"))


def test_deleted_log_is_missing_with_its_key_and_the_run_finishes(spark, tmp_path, master_store):
    archive, _, _ = pair(tmp_path, master_store)
    gone = _keys(archive, "a-1")[1]
    _obj(archive, gone).unlink()
    v = audit(spark, archive)
    assert v["status"] == T.RUN_FAILED and not v["passed"]
    faults = table(archive, v, "archive_faults")
    row = faults[faults.key == gone].iloc[0]
    assert row.kind == T.FAULT_LOG_MISSING and row.node == "a-1"
    ranges = table(archive, v, "ranges")
    missing = ranges[ranges.verdict == T.MISSING]
    start, end = layout.parse_key(gone).start, layout.parse_key(gone).end
    assert missing.start.min() <= start and end <= missing.end.max()
    assert status(v, T.ARCHIVE_INTEGRITY) == T.STATUS_FAIL
    assert status(v, T.REPLICA_CONSISTENCY) == T.STATUS_FAIL


@pytest.mark.parametrize("field", ["store_timestamp", "properties"])
def test_flip_outside_the_body_fails_on_sha256(spark, tmp_path, master_store, field) -> None:
    path, results = master_store
    archive = Archive(tmp_path / "archive")
    archive.ship(path, "a-0", "SYNC_MASTER", 0, 2048)
    key = _keys(archive, "a-0")[0]
    data = bytearray(_obj(archive, key).read_bytes())
    # the first record: STORETIMESTAMP sits after BORNTIMESTAMP and BORNHOST (IPv4); the
    # properties are the record's last bytes
    at = 56 + 8 + 2 if field == "store_timestamp" else results[0].wrote_bytes - 3
    data[at] ^= 0x10
    _obj(archive, key).write_bytes(bytes(data))
    v = audit(spark, archive)
    assert v["status"] == T.RUN_FAILED
    faults = table(archive, v, "archive_faults")
    assert list(faults.kind) == [T.FAULT_SHA256_MISMATCH] and list(faults.key) == [key]


def test_garbage_json_objects_and_an_orphan_log_are_faults(spark, tmp_path, master_store):
    archive, _, _ = pair(tmp_path, master_store)
    snap = layout.snapshot_key(CLUSTER, GROUP, "a-0", 5)
    archive.store.put(snap, b"{not json")
    ev = layout.event_key(CLUSTER, GROUP, "a-0", 6, "truncated")
    archive.store.put(ev, json.dumps({"kind": "truncated"}).encode())
    man = layout.manifest_key(_keys(archive, "a-1")[0])
    orphan = _keys(archive, "a-1")[0]
    _obj(archive, man).unlink()
    short = _keys(archive, "a-0")[2]
    _obj(archive, short).write_bytes(_obj(archive, short).read_bytes()[:-7])
    v = audit(spark, archive)
    kinds = dict(
        zip(
            table(archive, v, "archive_faults").key,
            table(archive, v, "archive_faults").kind,
            strict=True,
        )
    )
    assert kinds[snap] == T.FAULT_BAD_JSON
    assert kinds[ev] == T.FAULT_BAD_FIELDS
    assert kinds[orphan] == T.FAULT_MANIFEST_MISSING
    assert kinds[short] == T.FAULT_SIZE_MISMATCH
    assert v["status"] == T.RUN_FAILED


def test_single_node_without_offsets_has_no_evidence(spark, tmp_path, master_store):
    path, _ = master_store
    archive = Archive(tmp_path / "archive")
    archive.ship(path, "a-0", "SYNC_MASTER", 0, 2048)
    v = audit(spark, archive)
    assert v["status"] == T.RUN_NO_EVIDENCE and v["passed"]
    assert status(v, T.REPLICA_CONSISTENCY) == T.STATUS_NO_EVIDENCE
    assert status(v, T.OFFSET_MONOTONICITY) == T.STATUS_NO_EVIDENCE
    assert status(v, T.ACKNOWLEDGED_DURABILITY) == T.STATUS_NO_EVIDENCE
    assert status(v, T.LOG_INTEGRITY) == T.STATUS_PASS
    assert status(v, T.ARCHIVE_INTEGRITY) == T.STATUS_PASS
    strict = audit(spark, archive, require_evidence=True)
    assert strict["status"] == T.RUN_NO_EVIDENCE and not strict["passed"]
    checks = table(archive, strict, "checks")
    assert set(checks.check) == set(T.CHECKS + T.INFORMATIONAL_CHECKS)


def test_offsets_and_acks_give_evidence(spark, tmp_path, master_store):
    archive, _, _ = pair(tmp_path, master_store)
    archive.snapshot(
        "a-0",
        "SYNC_MASTER",
        10,
        slaves={"a-1": 100},
        confirmOffset=100,
        consumerOffsets={"orders@g": {"0": 3, "1": 2}},
        queueMaxOffsets={"orders": {"0": 30, "1": 30}},
    )
    v = audit(spark, archive)
    assert v["status"] == T.RUN_PASSED, v["checks"]
    assert all(c["evidence"] > 0 for c in v["checks"])
