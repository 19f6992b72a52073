"""``haproof audit --spark-master sc://...`` against a local Spark Connect server.

The server is a plain local Spark session with the Connect plugin (its jar ships with pyspark),
started by the test in its own process. The Python Connect client needs pyspark's ``connect``
extra (grpcio-status, googleapis-common-protos); where it is not installed the test is skipped
with that reason.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.spark_jobs.builder import Archive, make_store

SERVER = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]")
             .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
             .config("spark.connect.grpc.binding.port", sys.argv[1])
             .config("spark.connect.grpc.binding.address", "127.0.0.1")
             .config("spark.ui.enabled", "false").getOrCreate())
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    spark.stop()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_audit_through_spark_connect(tmp_path) -> None:
    pytest.importorskip("grpc_status", reason="pyspark[connect] extra (grpcio-status) missing")
    results = make_store(tmp_path / "m", 40)
    archive = Archive(tmp_path / "archive")
    archive.ship(tmp_path / "m", "a-0", "SYNC_MASTER", 0, chunk=3000)
    archive.ship(tmp_path / "m", "a-1", "SLAVE", 1, chunk=5000)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout.readline().strip() == "ready"
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "broker.cli",
                "audit",
                "--root",
                archive.root,
                "--cluster",
                "c1",
                "--run-id",
                "sc",
                "--no-expectations",
                "--spark-master",
                f"sc://127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.stdin.close()
        server.wait(timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    verdict = json.loads((tmp_path / "archive" / "audits" / "sc" / "verdict.json").read_text())
    assert verdict["passed"] and verdict["counts"] == {"match": 1}
    assert verdict["recordsChecked"] > 2 * len(results)  # every record of both nodes (+ BLANKs)
