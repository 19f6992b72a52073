"""One timed audit of ``haproof bench history``, in a process of its own (``python -m
tools.bench.history_run ROOT [--endpoint URL] [--incremental] [--spark-master M]``), so its
memory figures are this run's alone: one JSON line on stdout.

- ``s``: the audit (``run_audit``) alone, the Spark session already up;
- ``py_peak_mb``: the Python driver's peak resident memory (``ru_maxrss`` of this process, the
  kernel's high-water mark: exact, no sampling), ``py_start_mb`` what it held before the audit;
- ``jvm_peak_mb``: the Spark JVM's peak resident memory (``VmHWM`` of the java process under
  this one; in local mode driver and executors share it), ``jvm_start_mb`` before the audit;
- ``requests``: the driver's object store requests (executors' range reads not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

from tools.bench.history_archive import CLUSTER
from tools.proc_status import status_mb


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        pass
    return out


def jvm_pid() -> int | None:
    """The java process among this process's descendants (PySpark's gateway JVM)."""
    todo = _children(os.getpid())
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/comm") as fh:
                if fh.read().strip() == "java":
                    return pid
        except OSError:
            continue
        todo += _children(pid)
    return None


def rss_mb() -> float:
    return status_mb(os.getpid(), "VmRSS") or 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.history_run")
    p.add_argument("root")
    p.add_argument("--endpoint", default=None)
    p.add_argument("--incremental", action="store_true")
    p.add_argument("--spark-master", default="local[2]")
    args = p.parse_args(argv)

    from contracts.object_store import StoreSpec
    from spark_jobs.archive_reader import executor_store
    from spark_jobs.audit import AuditOptions, run_audit
    from spark_jobs.session import get_spark

    # as run_audit resolves it (credentials filled in): the same store, the same counters
    spec = StoreSpec(args.root, endpoint_url=args.endpoint).resolved()
    spark = get_spark("haproof-bench-history", args.spark_master, {})
    store = executor_store(spec)
    jvm = jvm_pid()
    py_start, jvm_start = rss_mb(), status_mb(jvm, "VmRSS")
    t0 = time.monotonic()
    v = run_audit(spark, AuditOptions(spec=spec, cluster=CLUSTER, incremental=args.incremental))
    seconds = time.monotonic() - t0
    out = {
        "s": round(seconds, 3),
        "passed": bool(v["passed"]),
        "py_start_mb": py_start,
        "py_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "jvm_start_mb": jvm_start,
        "jvm_peak_mb": status_mb(jvm, "VmHWM"),
        "requests": {k: n for k, n in sorted(store.requests.items()) if n},
    }
    if not v["passed"]:
        out["verdict"] = json.dumps(v)[:2000]
    print(json.dumps(out), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
