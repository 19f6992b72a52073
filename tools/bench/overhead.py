"""``haproof bench overhead``: a small audit's fixed overhead with a warm Spark Connect server,
one JSON line.

Starts a local Spark Connect server (a local Spark session with the Connect plugin, whose jar
ships with pyspark) and keeps it for the whole bench; builds a small master/slave archive on a
file:// root; then runs ``haproof audit``'s steps (``pipeline.steps``: audit → suites → report
→ publish, as ``run_pipeline`` chains them, GX's import started beside the Spark jobs) in a
fresh Python process per run, as a user's command would, ``--runs`` times after one warm-up run
(which warms the server). Figures, the median of the runs:
- ``total_s``: the command as a user waits for it, from the parent starting the process to its
  exit; ``checks_s``: the seconds the audit spent judging (its groups' ``seconds``: the
  comparison and integrity jobs to the verdict); ``overhead_s`` = ``total_s - checks_s``
  (target <= 3 s);
- ``startup_s`` (the interpreter, the pipeline's imports and the modules the audit and GX's
  import share: pandas, pyarrow, the Spark Connect client), ``audit_s`` (the audit step) and
  its part outside the checks: ``audit_prepare_s`` (the session, the leases, listing and loading
  the group), ``audit_write_s`` (the group's tables, verdict and state written),
  ``audit_finish_s`` (the run's summary, the session stopped, the leases released), read from
  its progress lines; ``expectations_s`` (the GX step, target <= 2 s), ``report_s``,
  ``publish_s``, ``exit_s`` (the interpreter's exit);
- the GX step's phases: ``gx_import_s`` (what the step still waited for GX's import, started
  beside the audit), ``gx_context_s``, ``gx_suites_s``, ``gx_validation_s`` (the seven
  suites), ``gx_docs_s`` (one Data Docs build), ``gx_read_s`` (the tables),
  ``gx_publish_s`` (offline assets, upload, ``expectations.json``); ``expectations_cpu_s``
  and ``process_cpu_s``: the CPU seconds of the GX step and of the whole client process
  (figures other jobs on a shared machine move far less than wall time);
- ``gx_import_alone_s``, ``gx_import_alone_cpu_s``: GX's import as the step does it
  (``expectations/gx_import.py``), alone in a fresh process (pandas, pyarrow and pyspark
  imported before), for scale; ``bytecode_cached``: whether the installed packages have their
  bytecode (``scripts/bootstrap`` compiles it; without it every run compiles them again).

Where the time goes, and what was cut: docs/benchmarks.md, "Where a small audit's time goes".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from contracts.object_store import open_store

SERVER = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]")
         .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
         .config("spark.connect.grpc.binding.port", sys.argv[1])
         .config("spark.connect.grpc.binding.address", "127.0.0.1")
         .config("spark.ui.enabled", "false").getOrCreate())
print("ready", flush=True)
sys.stdin.read()
spark.stop()
"""

GX_IMPORT = """
import time
import pandas, pyarrow.parquet, pyspark.sql
from expectations.gx_import import import_gx
t, c = time.perf_counter(), time.process_time()
import_gx()
print(time.perf_counter() - t, time.process_time() - c)
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("overhead", help="a small audit's fixed overhead (Spark Connect)")
    p.add_argument("--messages", type=int, default=2000, help="messages in the archive")
    p.add_argument("--runs", type=int, default=3, help="measured runs after one warm-up")
    p.add_argument("--spark-master", default=None, help="a running sc://host:port to use")
    p.set_defaults(func=run)


def build_archive(workdir: str, messages: int) -> str:
    from broker.archive.shipper import NodeIdentity, Shipper
    from broker.archive.sources import StoreDirSource
    from broker.config import BrokerConfig
    from broker.store.message_store import MessageStore
    from contracts.record.model import Message

    store_dir = os.path.join(workdir, "store")
    ms = MessageStore.open(BrokerConfig(store_path_root_dir=store_dir))
    body = os.urandom(1024)
    for n in range(messages):
        ms.put_message(Message("BenchTopic", body, queue_id=n % 4, properties={"TAGS": "b"}))
    ms.shutdown()
    root = "file://" + os.path.join(workdir, "archive")
    store = open_store(root)
    for node, role, bid in (("a-0", "SYNC_MASTER", 0), ("a-1", "SLAVE", 1)):
        src = StoreDirSource.open(store_dir)
        Shipper(store, NodeIdentity("bench", "broker-a", node, bid, role)).ship(src)
        src.close()
    return root


def _timed(fn, *args):
    t0 = time.perf_counter()
    return fn(*args), time.perf_counter() - t0


class _ProgressMarks(io.TextIOBase):
    """stderr, passed through, with the time each of the audit's progress lines was written."""

    def __init__(self, stream) -> None:
        self.stream, self.marks = stream, []

    def write(self, text: str) -> int:
        self.marks.extend((time.perf_counter(), line) for line in text.splitlines())
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def first(self, needle: str) -> float | None:
        return next((t for t, line in self.marks if needle in line), None)


def _audit_split(marks: _ProgressMarks, t0: float, audit_s: float, checks_s: float) -> dict:
    """The audit step's seconds outside the checks, from its progress lines: before the first
    group's checks (the session, the leases, listing and loading the group), writing the
    groups' outputs and state, and after (the run's summary, the session stopped, the leases
    released)."""
    loaded, written = marks.first(" node(s), master "), marks.first("outputs written under")
    if loaded is None or written is None:
        return {}
    return {
        "audit_prepare_s": loaded - t0,
        "audit_write_s": max(0.0, written - loaded - checks_s),
        "audit_finish_s": t0 + audit_s - written,
    }


def child(root: str, master: str, run_id: str, started: float) -> dict:
    """One run of the pipeline's steps in this (fresh) process, each timed; ``started``: the
    parent's clock when it started the process (the interpreter's start-up counts)."""
    from expectations.gx_import import prefetch
    from expectations.validation import SuiteRunner
    from pipeline import steps

    cfg = steps.PipelineConfig(root=root, cluster="bench", spark_master=master, run_id=run_id)
    prefetch("pandas", "pyarrow.parquet", "pyspark.sql", "pyspark.sql.connect.session")
    imported = time.time()
    marks = _ProgressMarks(sys.stderr)
    t_audit = time.perf_counter()
    with contextlib.redirect_stderr(marks):
        summary, audit_s = _timed(steps.audit_step, cfg)
    checks_s = sum(v["seconds"] for v in summary["groupVerdicts"])
    audit = steps.compact(summary)
    t0, c0 = time.perf_counter(), time.process_time()
    runner = SuiteRunner()
    gx = steps.expectations_step(cfg, audit, runner)
    gx_s, gx_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    reports, report_s = _timed(steps.report_step, cfg, audit)
    doc, publish_s = _timed(steps.publish_step, cfg, audit, gx, reports)
    return {
        "passed": doc["passed"],
        "done": time.time(),
        "checks_s": checks_s,
        "startup_s": imported - started,
        "audit_s": audit_s,
        **_audit_split(marks, t_audit, audit_s, checks_s),
        "expectations_s": gx_s,
        "expectations_cpu_s": gx_cpu_s,
        "report_s": report_s,
        "publish_s": publish_s,
        "process_cpu_s": time.process_time(),
        **{f"gx_{k}_s": v for k, v in runner.timings_s.items()},
    }


def _one_run(root: str, master: str, run_id: str) -> dict:
    code = (
        "import sys, json; from tools.bench.overhead import child; "
        "print(json.dumps(child(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))))"
    )
    started = time.time()
    res = subprocess.run(
        [sys.executable, "-c", code, root, master, run_id, repr(started)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    ended = time.time()
    if res.returncode != 0:
        raise RuntimeError(f"bench run {run_id} failed: {res.stderr[-3000:]}")
    figures = json.loads(res.stdout.strip().splitlines()[-1])
    # the whole command as a user waits for it: the interpreter's start to its exit
    figures.update(total_s=ended - started, exit_s=ended - figures.pop("done"))
    return figures


def run(args: argparse.Namespace) -> int:
    workdir = tempfile.mkdtemp(prefix="haproof-bench-overhead-")
    server = None
    try:
        root = build_archive(workdir, args.messages)
        master = args.spark_master
        if master is None:
            server, master = start_connect_server()
        _one_run(root, master, "warmup")
        runs = [_one_run(root, master, f"run{i}") for i in range(args.runs)]
        gx_alone = subprocess.run(
            [sys.executable, "-c", GX_IMPORT], capture_output=True, text=True, timeout=600
        )
    finally:
        if server is not None:
            server.stdin.close()
            server.wait(timeout=120)
        shutil.rmtree(workdir, ignore_errors=True)
    figures = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0] if k != "passed"}
    alone = [round(float(x), 2) for x in (gx_alone.stdout.split() or ["nan", "nan"])]
    figures["overhead_s"] = round(figures["total_s"] - figures["checks_s"], 2)
    print(
        json.dumps(
            {
                "bench": "overhead",
                "messages": args.messages,
                "runs": args.runs,
                "passed": all(r["passed"] for r in runs),
                **figures,
                "gx_import_alone_s": alone[0],
                "gx_import_alone_cpu_s": alone[1],
                "bytecode_cached": _bytecode_cached(),
                "load_avg_1m": round(os.getloadavg()[0], 1),
                "cpus": os.cpu_count(),
            }
        )
    )
    return 0 if all(r["passed"] for r in runs) else 1


def _bytecode_cached() -> bool:
    """Whether the installed packages have their bytecode (``scripts/bootstrap`` compiles it):
    without it, and with PYTHONDONTWRITEBYTECODE set, each run compiles every module again."""
    import importlib.util

    import pandas

    return os.path.exists(importlib.util.cache_from_source(pandas.__file__))


def start_connect_server(timeout_s: float = 300) -> tuple[subprocess.Popen, str]:
    """A local Spark Connect server on a free port of 127.0.0.1, ready."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the server's Python workers run this interpreter, as get_spark sets it for a local session
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ready = threading.Event()
    threading.Thread(
        target=lambda: proc.stdout.readline().strip() == "ready" and ready.set(), daemon=True
    ).start()
    deadline = time.monotonic() + timeout_s
    while not ready.wait(0.5):
        if proc.poll() is None and time.monotonic() < deadline:
            continue
        proc.kill()
        proc.wait(timeout=60)
        raise RuntimeError(f"the Spark Connect server did not start in {timeout_s} s")
    return proc, f"sc://127.0.0.1:{port}"
