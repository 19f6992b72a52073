"""``haproof audit --spark-master sc://...`` against a local Spark Connect server.

The server is a plain local Spark session with the Connect plugin (its jar ships with pyspark),
started by the test in its own process (``tests/support/spark_connect.py``). The Python Connect
client needs pyspark's ``connect`` extra (grpcio-status, googleapis-common-protos); where it is
not installed the test is skipped with that reason.
"""

from __future__ import annotations

import json

import pytest

from tests.spark_jobs.builder import Archive, make_store
from tests.support.haproof_cli import audit
from tests.support.spark_connect import spark_connect_server


def test_audit_through_spark_connect(tmp_path) -> None:
    pytest.importorskip("grpc_status", reason="pyspark[connect] extra (grpcio-status) missing")
    results = make_store(tmp_path / "m", 40)
    archive = Archive(tmp_path / "archive")
    archive.ship(tmp_path / "m", "a-0", "SYNC_MASTER", 0, chunk=3000)
    archive.ship(tmp_path / "m", "a-1", "SLAVE", 1, chunk=5000)
    with spark_connect_server() as url:
        res, _ = audit(
            "--root",
            archive.root,
            "--cluster",
            "c1",
            "--run-id",
            "sc",
            "--no-expectations",
            "--spark-master",
            url,
            timeout_s=600,
        )
    assert res.returncode == 0, res.stdout + res.stderr
    verdict = json.loads((tmp_path / "archive" / "audits" / "sc" / "verdict.json").read_text())
    assert verdict["passed"] and verdict["counts"] == {"match": 1}
    assert verdict["recordsChecked"] > 2 * len(results)  # every record of both nodes (+ BLANKs)
