"""``haproof bench audit``: audit speed against a download-and-compare baseline, one JSON line.

Builds a master/slave archive of ``--gib`` GiB of log per node in the embedded S3 server (moto,
over HTTP), then measures in the same run:
- baseline: download both replicas' chunks with boto3 and compare the bytes (no record checks);
- the full audit (Spark local mode; session start-up measured apart);
- an incremental re-run with no new data.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from broker.archive.object_store import StoreSpec, open_store
from broker.archive.s3server import S3Server
from broker.archive.shipper import NodeIdentity, Shipper, StoreDirSource
from broker.config import BrokerConfig
from broker.store.message import Message
from broker.store.message_store import MessageStore


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("audit", help="audit MB/s and records/s against a baseline")
    p.add_argument("--gib", type=float, default=1.0, help="log size per node (GiB)")
    p.add_argument("--body-bytes", type=int, default=1024)
    p.add_argument("--spark-master", default=None)
    p.set_defaults(func=run)


def build_archive(workdir: str, server: S3Server, gib: float, body_bytes: int) -> dict:
    store_dir = os.path.join(workdir, "store")
    cfg = BrokerConfig(store_path_root_dir=store_dir, mapped_file_size_commit_log=128 << 20)
    ms = MessageStore.open(cfg)
    body = os.urandom(body_bytes)
    target = int(gib * (1 << 30))
    n = 0
    while ms.max_phy_offset < target:
        ms.put_message(Message("BenchTopic", body, queue_id=n % 8, properties={"TAGS": "b"}))
        n += 1
    end = ms.max_phy_offset
    ms.shutdown()
    server.create_bucket("bench")
    store = open_store("s3://bench/audit", **server.store_options())
    for node, role, bid in (("a-0", "SYNC_MASTER", 0), ("a-1", "SLAVE", 1)):
        src = StoreDirSource.open(store_dir)
        Shipper(store, NodeIdentity("bench", "broker-a", node, bid, role)).ship(src)
        src.close()
    shutil.rmtree(store_dir)
    return {"messages": n, "log_bytes": end}


def baseline(server: S3Server) -> float:
    """Download both replicas' chunks with boto3 and compare their bytes."""
    client = server.client()
    t0 = time.perf_counter()
    logs = {}
    for node in ("a-0", "a-1"):
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket="bench", Prefix=f"audit/v1/bench/broker-a/{node}/commitlog/"
        )
        logs[node] = [
            o["Key"] for p in pages for o in p.get("Contents", []) if o["Key"].endswith(".log")
        ]
    for k0, k1 in zip(sorted(logs["a-0"]), sorted(logs["a-1"]), strict=True):
        a = client.get_object(Bucket="bench", Key=k0)["Body"].read()
        b = client.get_object(Bucket="bench", Key=k1)["Body"].read()
        if a != b:
            raise AssertionError(f"baseline: {k0} and {k1} differ")
    return time.perf_counter() - t0


def _warm(batches):
    import boto3  # noqa: F401  (the imports every audit task needs)

    import spark_jobs.log_integrity  # noqa: F401
    import spark_jobs.replica_consistency  # noqa: F401

    yield from batches


def warm_up(spark) -> None:
    """Start the Python workers and their imports: part of start-up, not of the audit."""
    from spark_jobs.session import default_parallelism

    n = default_parallelism(spark)
    spark.range(0, n, 1, n).mapInPandas(_warm, "id long").collect()


def run(args: argparse.Namespace) -> int:
    from spark_jobs.audit import AuditOptions, run_audit
    from spark_jobs.session import get_spark

    workdir = tempfile.mkdtemp(prefix="haproof-bench-audit-")
    server = S3Server.start()
    try:
        t0 = time.perf_counter()
        built = build_archive(workdir, server, args.gib, args.body_bytes)
        build_s = time.perf_counter() - t0
        base_s = baseline(server)
        t0 = time.perf_counter()
        spark = get_spark("haproof-bench-audit", args.spark_master)
        warm_up(spark)
        startup_s = time.perf_counter() - t0
        spec = StoreSpec("s3://bench/audit", **server.store_options())
        opts = AuditOptions(spec=spec, cluster="bench", broker_name="broker-a", run_id="full")
        t0 = time.perf_counter()
        full = run_audit(spark, opts)
        first_s = time.perf_counter() - t0
        opts.run_id = "full-again"  # the same audit with Spark's plans and workers warm
        t0 = time.perf_counter()
        run_audit(spark, opts)
        full_s = time.perf_counter() - t0
        opts.incremental, opts.run_id = True, "incremental"
        t0 = time.perf_counter()
        run_audit(spark, opts)
        inc_s = time.perf_counter() - t0
        spark.stop()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    records = full["groupVerdicts"][0]["recordsChecked"]
    by_identity = full["groupVerdicts"][0].get("recordsByIdentity", 0)
    mb = built["log_bytes"] / 1e6
    print(
        json.dumps(
            {
                "bench": "audit",
                "gib_per_node": args.gib,
                "log_bytes_per_node": built["log_bytes"],
                "records_checked": records,
                "records_by_identity": by_identity,
                "records_decoded_per_s": round((records - by_identity) / full_s),
                "passed": full["passed"],
                "build_s": round(build_s, 1),
                "spark_startup_s": round(startup_s, 1),
                "baseline_s": round(base_s, 2),
                "baseline_mb_per_s_per_pair": round(mb / base_s, 1),
                "audit_first_run_s": round(first_s, 2),
                "audit_s": round(full_s, 2),
                "audit_mb_per_s_per_pair": round(mb / full_s, 1),
                "audit_vs_baseline": round(base_s / full_s, 2),
                "records_per_s": round(records / full_s),
                "incremental_noop_s": round(inc_s, 2),
                "incremental_vs_full": round(inc_s / full_s, 3),
                "cpus": os.cpu_count(),
            }
        )
    )
    return 0 if full["passed"] else 1
