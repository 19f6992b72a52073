"""``haproof bench audit``: audit speed against a download-and-compare baseline, one JSON line.

Builds a master/slave archive of ``--gib`` GiB of log per node in the embedded S3 server (moto,
over HTTP), then measures in the same run:
- baseline: download both replicas' chunks with boto3 (plain GETs) and compare the bytes (no
  record checks); ``baseline_same_path``: the same download over the audit's own path (whole
  object Range GETs, in a process with the executors' malloc settings), the stricter yardstick;
- the full audit (Spark local mode; session start-up measured apart), end to end;
- the record checks alone: the master's chunks (downloaded first, not timed) checked by
  ``check_chunk`` on one thread per core, wall time from start to the last chunk done;
- incremental re-runs with no new data.

Figures (one JSON line):
- ``audit_s``: wall seconds of a warm full audit (the better of the second and third runs, as
  the baselines are the better of two), listing to outputs written;
  ``audit_vs_baseline`` = ``baseline_s / audit_s`` (target >= 0.7); ``audit_cpu_s``,
  ``baseline_cpu_s``: the CPU seconds the process tree (this process, the S3 server, Spark's
  JVM and workers) used in those runs (the lesser of the two each), and
  ``audit_vs_baseline_cpu`` their ratio: what the wall figures would be with the cores to
  itself, roughly, when other jobs share the machine;
- ``records_checked``: every record of both nodes (the slave's verified by identity: its bytes
  equal the master's, whose records were decoded and checked);
- ``record_checks_per_s``: records decoded and checked / wall seconds of the record checks
  alone on ``cpus`` threads (target >= 3 M on 2 cores); ``audit_record_check_*``: the seconds
  the audit's own tasks spent inside the record checks (wall and CPU, summed over chunks) and
  records decoded per CPU second there;
- ``records_per_s``: records_checked / audit_s, end to end;
- ``incremental_noop_s``: a warm incremental run with no new data (the better of the second and
  third; ``incremental_noop_first_s`` the first), ``incremental_vs_full`` its share of
  ``audit_s`` (target <= 5 %);
- ``report_bytes``, ``report_build_s``: the group's ``report.html`` rebuilt from the first full
  run's real tables, as ``haproof report`` does (read the tables, verdict, snapshots and events
  over S3, render, write): its size and the better of two builds' wall seconds
  (``report_build_first_s`` the first, in this process after the audits).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from broker.archive.shipper import NodeIdentity, Shipper
from broker.archive.sources import StoreDirSource
from broker.config import BrokerConfig
from broker.store.message_store import MessageStore
from contracts.object_store import StoreSpec, open_store
from contracts.offset_commits.builder import commit_message
from contracts.offset_commits.model import OffsetCommit
from contracts.record.model import Message
from tools.localcluster import child_pids, process_cpu_s
from tools.s3server import S3Server


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("audit", help="audit MB/s and records/s against a baseline")
    p.add_argument("--gib", type=float, default=1.0, help="log size per node (GiB)")
    p.add_argument("--body-bytes", type=int, default=1024)
    p.add_argument("--spark-master", default=None)
    p.add_argument(
        "--commit-every",
        type=int,
        default=0,
        help="also store an offset commit record of 256 queues (DESIGN.md 3b) every N "
        "messages, as offsetCommitThroughLog does (0: none)",
    )
    p.add_argument(
        "--uniq-keys",
        action="store_true",
        help="give every message a UNIQ_KEY (32 hex digits, as RocketMQ producers do) and store "
        "every 1,000th twice (a retried send), for the delivery check's duplicate counting",
    )
    p.set_defaults(func=run)


def build_archive(
    workdir: str,
    server: S3Server,
    gib: float,
    body_bytes: int,
    commit_every: int = 0,
    uniq_keys: bool = False,
) -> dict:
    store_dir = os.path.join(workdir, "store")
    cfg = BrokerConfig(store_path_root_dir=store_dir, mapped_file_size_commit_log=128 << 20)
    ms = MessageStore.open(cfg)
    body = os.urandom(body_bytes)
    target = int(gib * (1 << 30))
    n = 0
    while ms.max_phy_offset < target:
        props = {"TAGS": "b"}
        if uniq_keys:
            props["UNIQ_KEY"] = f"{n - (n % 1000 == 1):032X}"  # the 1,000th again: a retry
        ms.put_message(Message("BenchTopic", body, queue_id=n % 8, properties=props))
        n += 1
        if commit_every and n % commit_every == 0:  # 4 groups take turns, every queue rises
            rnd = n // commit_every
            c = OffsetCommit(
                "commit",
                f"bench-{rnd % 4}",
                "BenchCommits",
                {q: rnd for q in range(256)},
                0,
                rnd,
                "127.0.0.1:1",
            )
            ms.put_message(commit_message(c))
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


def build_for(workdir: str, server: S3Server, args: argparse.Namespace) -> dict:
    """:func:`build_archive` with the command's options."""
    return build_archive(
        workdir, server, args.gib, args.body_bytes, args.commit_every, args.uniq_keys
    )


def tree_cpu_s() -> float:
    """CPU seconds used so far by this process and every live descendant (the embedded S3
    server, Spark's JVM and its Python workers; Linux /proc): a figure that other jobs on a
    shared machine move far less than wall time. A descendant that ended is no longer counted,
    so only differences over spans where none ends mean anything (the timed runs)."""
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            total += process_cpu_s(pid)
        except (OSError, ValueError, IndexError):  # ended meanwhile
            continue
        todo += child_pids(pid)
    return total


def cpu_timed(fn, *args):
    """(result, wall seconds, CPU seconds of the process tree) of ``fn(*args)``."""
    c0, t0 = tree_cpu_s(), time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0, tree_cpu_s() - c0


def baseline(server: S3Server, ranges: bool = False) -> float:
    """Download both replicas' chunks with boto3 and compare their bytes (``ranges``: each
    object by one Range GET of all its bytes, the path the audit's executors use)."""
    client = server.client()
    get = client.get_object
    if ranges:
        sizes = {}

        def get(Bucket, Key):  # noqa: N803 (boto3's names)
            rng = f"bytes=0-{sizes[Key] - 1}"
            return client.get_object(Bucket=Bucket, Key=Key, Range=rng)

    t0 = time.perf_counter()
    logs = {}
    for node in ("a-0", "a-1"):
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket="bench", Prefix=f"audit/v1/bench/broker-a/{node}/commitlog/"
        )
        objs = [o for p in pages for o in p.get("Contents", []) if o["Key"].endswith(".log")]
        logs[node] = [o["Key"] for o in objs]
        if ranges:
            sizes.update((o["Key"], o["Size"]) for o in objs)
    for k0, k1 in zip(sorted(logs["a-0"]), sorted(logs["a-1"]), strict=True):
        a = get(Bucket="bench", Key=k0)["Body"].read()
        b = get(Bucket="bench", Key=k1)["Body"].read()
        if a != b:
            raise AssertionError(f"baseline: {k0} and {k1} differ")
    return time.perf_counter() - t0


def baseline_same_path(server: S3Server) -> float:
    """:func:`baseline` with Range GETs, in a child process started with the executors' malloc
    settings (``spark.executorEnv.MALLOC_*``): the audit's transport with nothing checked."""
    from spark_jobs.session import DEFAULT_CONF

    env = dict(os.environ)
    prefix = "spark.executorEnv."
    env.update({k[len(prefix) :]: v for k, v in DEFAULT_CONF.items() if k.startswith(prefix)})
    code = (
        "import sys\n"
        "from tools.s3server import S3Server\n"
        "from tools.bench.audit import baseline\n"
        "print(baseline(S3Server(int(sys.argv[1]), None), ranges=True))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(server.port)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def record_checks_alone(server: S3Server, threads: int) -> dict:
    """The record checks (``check_chunk``) over the master's chunks on ``threads`` threads (the
    compiled kernels release the GIL), the chunks downloaded first (not timed): the wall time
    from the first chunk started to the last one done."""
    from concurrent.futures import ThreadPoolExecutor

    from contracts import _walk_nb as fastscan
    from contracts.record_walk import check_chunk

    fastscan.warm()
    store = open_store("s3://bench/audit", **server.store_options())
    prefix = "v1/bench/broker-a/a-0/commitlog/"
    chunks = []
    for o in store.list(prefix):
        if o.key.endswith(".json"):
            man = json.loads(store.get(o.key))
            data = store.get(o.key[: -len(".json")] + ".log")
            chunks.append((data, man["start"], man["mappedFileSize"]))
    chunks.sort(key=lambda c: -len(c[0]))
    shares = [chunks[i::threads] for i in range(threads)]

    def check(share: list) -> int:
        n = 0
        for data, start, file_size in share:
            issues, _queues, records = check_chunk(data, start, file_size, "bench")
            if issues:
                raise AssertionError(f"bench archive: record issue {issues[0]}")
            n += records
        return n

    with ThreadPoolExecutor(threads) as pool:
        t0 = time.perf_counter()
        records = sum(pool.map(check, shares))
        wall_s = time.perf_counter() - t0
    return {"records": records, "wall_s": wall_s, "threads": threads}


def _warm(batches):
    import boto3  # noqa: F401  (the imports every audit task needs)

    import spark_jobs.log_integrity  # noqa: F401
    import spark_jobs.replica_consistency  # noqa: F401
    from contracts import _walk_nb as fastscan

    fastscan.warm()  # numba's import and the cached kernels (compiled on a first run)

    yield from batches


def warm_up(spark) -> None:
    """Start the Python workers and their imports: part of start-up, not of the audit."""
    from spark_jobs.session import default_parallelism, run_tasks

    n = default_parallelism(spark)
    run_tasks(spark, [(i,) for i in range(n)], "id long", n, _warm, "id long")


def _time_audits(spark, server: S3Server) -> dict:
    """The full audit (first run, then the better of two warm runs) and no-op incremental
    runs (the first, then the better of the next two), in seconds."""
    from spark_jobs.audit import AuditOptions, run_audit

    spec = StoreSpec("s3://bench/audit", **server.store_options())
    opts = AuditOptions(spec=spec, cluster="bench", broker_name="broker-a", run_id="full")
    t0 = time.perf_counter()
    full = run_audit(spark, opts)
    first_s = time.perf_counter() - t0
    # the same audit with Spark's plans and workers warm: the better of two runs, as for
    # the baselines (the machine is shared; one run moves by up to 40 % here)
    warm = []
    for i in range(2):
        opts.run_id = f"full-again-{i}"
        verdict, wall_s, cpu_s = cpu_timed(run_audit, spark, opts)
        warm.append((wall_s, verdict, cpu_s))
    full_s, again, _ = min(warm, key=lambda w: w[0])
    # no-op incremental runs: the first, then the better of the next two (warm, likewise)
    inc_runs = []
    for i in range(3):
        opts.incremental, opts.run_id = True, f"incremental-{i}"
        t0 = time.perf_counter()
        run_audit(spark, opts)
        inc_runs.append(time.perf_counter() - t0)
    inc_first_s, inc_s = inc_runs[0], min(inc_runs[1:])
    return {
        "full": full,
        "first_s": first_s,
        "full_s": full_s,
        "cpu_s": min(w[2] for w in warm),
        "again": again,
        "inc_first_s": inc_first_s,
        "inc_s": inc_s,
    }


def report_build(server: S3Server, run_id: str) -> dict:
    """Rebuild and write the run's report twice (``haproof report``'s path, in process)."""
    from expectations.evidence.publish import build_report, report_key

    store = open_store("s3://bench/audit", **server.store_options())
    builds = []
    for _ in range(2):
        t0 = time.perf_counter()
        html, _stats = build_report(store, run_id, "broker-a")
        store.put_mutable(report_key(run_id, "broker-a"), html)
        builds.append(time.perf_counter() - t0)
    return {"bytes": len(html), "first_s": builds[0], "s": min(builds)}


def run(args: argparse.Namespace) -> int:
    from spark_jobs.session import get_spark

    workdir = tempfile.mkdtemp(prefix="haproof-bench-audit-")
    server = S3Server.start()
    try:
        t0 = time.perf_counter()
        built = build_for(workdir, server, args)
        build_s = time.perf_counter() - t0
        # the better of two runs each (the first pays for connections and cold buffers), as
        # the audit's figure is its second, warm run
        base = [cpu_timed(baseline, server)[1:] for _ in range(2)]
        base_s, base_cpu_s = min(b[0] for b in base), min(b[1] for b in base)
        same_path_s = min(baseline_same_path(server) for _ in range(2))
        t0 = time.perf_counter()
        spark = get_spark("haproof-bench-audit", args.spark_master)
        warm_up(spark)
        startup_s = time.perf_counter() - t0
        audits = _time_audits(spark, server)
        spark.stop()
        alone = record_checks_alone(server, os.cpu_count() or 2)
        report = report_build(server, "full")
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    full, again, full_s = audits["full"], audits["again"], audits["full_s"]
    first_s, inc_first_s, inc_s = audits["first_s"], audits["inc_first_s"], audits["inc_s"]
    records = full["groupVerdicts"][0]["recordsChecked"]
    by_identity = full["groupVerdicts"][0].get("recordsByIdentity", 0)
    timing = again["groupVerdicts"][0]["timing"]
    mb = built["log_bytes"] / 1e6
    print(
        json.dumps(
            {
                "bench": "audit",
                "gib_per_node": args.gib,
                "commit_every": args.commit_every,
                "log_bytes_per_node": built["log_bytes"],
                "records_checked": records,
                "records_by_identity": by_identity,
                "records_decoded": records - by_identity,
                "passed": full["passed"],
                "build_s": round(build_s, 1),
                "spark_startup_s": round(startup_s, 1),
                "baseline_s": round(base_s, 2),
                "baseline_mb_per_s_per_pair": round(mb / base_s, 1),
                "audit_first_run_s": round(first_s, 2),
                "audit_s": round(full_s, 2),
                "audit_mb_per_s_per_pair": round(mb / full_s, 1),
                "audit_vs_baseline": round(base_s / full_s, 2),
                "baseline_cpu_s": round(base_cpu_s, 2),
                "audit_cpu_s": round(audits["cpu_s"], 2),
                "audit_vs_baseline_cpu": round(base_cpu_s / audits["cpu_s"], 2),
                "baseline_same_path_s": round(same_path_s, 2),
                "audit_vs_baseline_same_path": round(same_path_s / full_s, 2),
                "records_per_s": round(records / full_s),
                "record_checks_alone_s": round(alone["wall_s"], 3),
                "record_checks_per_s": round(alone["records"] / alone["wall_s"]),
                "record_checks_threads": alone["threads"],
                "audit_scan_job_s": timing["scanJobS"],
                "audit_log_integrity_job_s": timing["logIntegrityJobS"],
                "audit_task_read_s": timing["scanReadS"],
                "audit_task_compare_s": timing["scanCompareS"],
                "audit_record_check_s": timing["recordCheckS"],
                "audit_record_check_cpu_s": timing["recordCheckCpuS"],
                "audit_records_decoded_per_cpu_s": round(
                    timing["recordsDecoded"] / max(timing["recordCheckCpuS"], 1e-9)
                ),
                "incremental_noop_s": round(inc_s, 3),
                "incremental_noop_first_s": round(inc_first_s, 3),
                "incremental_vs_full": round(inc_s / full_s, 3),
                "report_bytes": report["bytes"],
                "report_build_s": round(report["s"], 2),
                "report_build_first_s": round(report["first_s"], 2),
                "cpus": os.cpu_count(),
            }
        )
    )
    return 0 if full["passed"] else 1
