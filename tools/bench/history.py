"""``haproof bench history``: what a nightly audit costs as the archive ages, one JSON line.

Writes a synthetic archive at production density straight into a store (no brokers; see
``tools/bench/history_archive.py``): per group ``--nodes`` nodes, a chunk every
``--chunk-interval-s``, a snapshot of every node every ``--snapshot-interval-s`` (60 s,
``snapshotIntervalMs``), a failover every ``--failover-every-days``.

The default chunk interval, 70 s, is what the node archiver writes on a quiet broker with its
default settings: it ships every ``archiveIntervalMs`` (10 s) only once ``archiveChunkMinBytes``
(4 MiB) are waiting, else when the oldest waiting bytes are ``archiveChunkMaxAgeMs`` old (0 =
6 x ``archiveIntervalMs`` = 60 s), counted from the first round that held them back: a chunk
every 70 s under 4 MiB a minute. ``--chunk-interval-s 10`` is the worst case (a chunk every
round: ``archiveChunkMinBytes=0``).

Then, at each checkpoint day D (``--checkpoints``, default 1,30,365 up to ``--days``):

- ``full``: a full audit of the history before day D (ten minutes, then D-1 days more);
- ``day``: an incremental run after day D's objects are added (a nightly run);
- ``noop``: an incremental run with nothing new;

each in a fresh process (``tools/bench/history_run.py``: its figures are that run's alone:
time, the Python driver's and the JVM's peak resident memory, the driver's store requests),
plus the size of ``state.json``. ``noop_ratio`` and ``day_ratio`` = last checkpoint / first
(targets <= 1.5), ``state_bytes`` (target < 1 MB), ``*_peak_ratio`` the same for memory.

``--s3``: everything above on the embedded S3 server (every object written over HTTP: ~300
objects/s here, hours for a year). ``--s3-mirror``: the file:// archive is the source of truth
and the nightly runs are also timed on S3 at each checkpoint D. The history before D is written
and fully audited on file:// as above; then the embedded S3 server starts with its bucket
preloaded from that directory (every object and the audit's state, inserted into moto's backend
in the server process, no HTTP per object: ``tools/s3server_preload.py``), day D's objects are
written to both stores (the same objects), and the day and no-op incrementals run on file:// and
then on S3, each from the same state. ``at[D]`` keeps the file:// figures; ``at[D]["s3"]`` holds
``preload_s``, ``preloaded_objects`` (the ``written_before`` objects of the history and
the full audit's outputs), ``objects_per_s`` (of the preload), ``day``, ``noop``,
``state_bytes`` and the server's ``server_rss_mb`` / ``server_peak_mb`` after the runs; the
server is stopped before the next checkpoint. The last line adds ``s3_noop_ratio``,
``s3_day_ratio``, the S3 runs' memory ratios, ``s3_state_bytes``, ``s3_objects_per_s`` and
``s3_server_rss_mb``. A full audit over S3 at a year's scale (millions of GETs at ~6 ms) is not
timed: the nightly runs are what the targets are about.
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

from contracts import archive_layout as layout
from contracts.object_store import StoreSpec
from contracts.record.builder import encode_message
from contracts.record.model import Message
from tools.bench.history_archive import CLUSTER, T0_MS, Writer

DAY_MS = 86_400_000
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("history", help="nightly audit cost as the archive ages")
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--bytes-per-day", type=int, default=0, help="0: one small record a chunk")
    p.add_argument(
        "--chunk-interval-s",
        type=int,
        default=70,
        help="70: the archiver's default on a quiet broker; 10: the worst case",
    )
    p.add_argument("--snapshot-interval-s", type=int, default=60)
    p.add_argument("--failover-every-days", type=float, default=7.0)
    p.add_argument("--checkpoints", default="1,30,365", help="days to measure at (<= --days)")
    p.add_argument("--root", default=None, help="archive root (default: a temporary file://)")
    p.add_argument("--s3", action="store_true", help="write to the embedded S3 server instead")
    p.add_argument(
        "--s3-mirror",
        action="store_true",
        help="file:// as the source of truth; at each checkpoint also time the "
        "nightly runs on the embedded S3 server preloaded from it",
    )
    p.add_argument("--spark-master", default="local[2]")
    p.set_defaults(func=run)


def timed_audit(spec: StoreSpec, incremental: bool, spark_master: str, env: dict) -> dict:
    """One audit in a fresh process (its JSON line), with the process's wall time."""
    cmd = [
        sys.executable,
        "-m",
        "tools.bench.history_run",
        spec.root,
        "--spark-master",
        spark_master,
    ]
    if spec.endpoint_url:
        cmd += ["--endpoint", spec.endpoint_url]
    if incremental:
        cmd.append("--incremental")
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=7200)
    wall = time.monotonic() - t0
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise RuntimeError(f"audit process failed ({res.returncode}): {res.stderr[-3000:]}")
    out = json.loads(lines[-1])
    if not out.pop("passed"):
        raise RuntimeError(f"the synthetic history failed its audit: {out.get('verdict')}")
    out["process_s"] = round(wall, 1)
    return out


def _writer(args: argparse.Namespace, store) -> Writer:
    per_day = DAY_MS // (args.chunk_interval_s * 1000)
    body = 64
    rec_len = len(encode_message(Message("HistTopic", b"h" * body), ("127.0.0.1", 1)))
    per_chunk = max(1, args.bytes_per_day // max(1, per_day * rec_len))
    fast = store.path if hasattr(store, "path") else None
    return Writer(
        store,
        fast,
        args.groups,
        args.nodes,
        body,
        per_chunk,
        args.chunk_interval_s * 1000,
        args.snapshot_interval_s * 1000,
        int(args.failover_every_days * DAY_MS),
    )


def _ratios(out: dict, first: dict, last: dict, tag: str = "") -> None:
    """Last checkpoint / first: ``noop_ratio``, ``day_ratio``, the peak memories' ratios and the
    last ``state_bytes``; with ``tag`` ("s3_") the same for the figures under ``at[D]["s3"]``."""

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    out[f"{tag}noop_ratio"] = ratio(last["noop"]["s"], first["noop"]["s"])
    out[f"{tag}day_ratio"] = ratio(last["day"]["s"], first["day"]["s"])
    for what in ("py_peak_mb", "jvm_peak_mb"):
        for run in ("noop", "day"):
            out[f"{tag}{run}_{what[:-3]}_ratio"] = ratio(last[run][what], first[run][what])
    out[f"{tag}state_bytes"] = last["state_bytes"]
    if not tag and "s3" in last:
        _ratios(out, first["s3"], last["s3"], "s3_")
        out["s3_objects_per_s"] = last["s3"]["objects_per_s"]
        out["s3_server_rss_mb"] = last["s3"]["server_rss_mb"]


def _state_bytes(store, groups: int) -> int:
    return sum(len(store.get(layout.audit_state_key(CLUSTER, f"g{g}"))) for g in range(groups))


def mirrored_day(
    args: argparse.Namespace, w: Writer, spec: StoreSpec, until_ms: int, env: dict
) -> tuple[dict, dict, dict]:
    """``--s3-mirror`` at a checkpoint: the embedded S3 server preloaded from the file://
    archive (state included), the day's objects written to both stores, then the day and no-op
    incrementals on file:// and on S3. (file day, file no-op, the S3 figures)."""
    from tools.s3server import DUMMY_CREDENTIALS, S3Server

    written_before = w.objects
    server = S3Server.start(preload={"history": ("archive", w.fast_path)})
    try:
        s3spec = StoreSpec("s3://history/archive", **server.store_options())
        s3env = {**env, **DUMMY_CREDENTIALS}
        w.mirror = s3spec.open()
        try:
            w.write_until(until_ms)
        finally:
            mirror, w.mirror = w.mirror, None
        day = timed_audit(spec, True, args.spark_master, env)
        noop = timed_audit(spec, True, args.spark_master, env)
        s3_day = timed_audit(s3spec, True, args.spark_master, s3env)
        s3_noop = timed_audit(s3spec, True, args.spark_master, s3env)
        pre = server.preloaded
        s3 = {
            "preload_s": pre["s"],
            "preloaded_objects": pre["objects"],
            "preloaded_bytes": pre["bytes"],
            "written_before": written_before,
            "objects_per_s": round(pre["objects"] / pre["s"]) if pre["s"] else None,
            "day": s3_day,
            "noop": s3_noop,
            "state_bytes": _state_bytes(mirror, args.groups),
            "server_rss_mb": server.rss_mb(),
            "server_peak_mb": server.rss_mb("VmHWM"),
        }
        return day, noop, s3
    finally:
        server.stop()


def run(args: argparse.Namespace) -> int:
    checkpoints = sorted({int(d) for d in args.checkpoints.split(",") if 0 < int(d) <= args.days})
    if not checkpoints or args.nodes < 1 or args.groups < 1 or args.chunk_interval_s < 1:
        print(
            "haproof bench history: nothing to measure (check --days, --checkpoints)",
            file=sys.stderr,
        )
        return 2
    if args.s3_mirror and (args.s3 or (args.root and not args.root.startswith("file://"))):
        print(
            "haproof bench history: --s3-mirror mirrors a file:// archive (no --s3, --root "
            "file://... or none)",
            file=sys.stderr,
        )
        return 2
    work = tempfile.mkdtemp(prefix="haproof-history-")
    server = None
    env = dict(os.environ)
    try:
        if args.s3:
            from tools.s3server import DUMMY_CREDENTIALS, S3Server

            server = S3Server.start()
            server.create_bucket("history")
            spec = StoreSpec("s3://history/archive", **server.store_options())
            env.update(DUMMY_CREDENTIALS)
        else:
            spec = StoreSpec(args.root or f"file://{work}/archive")
        store = spec.open()
        w = _writer(args, store)
        out: dict = {
            "bench": "history",
            "root": spec.root.split("://")[0],
            "days": args.days,
            "s3_mirror": args.s3_mirror,
            "groups": args.groups,
            "nodes": args.nodes,
            "chunk_interval_s": args.chunk_interval_s,
            "chunks_per_day": DAY_MS // w.chunk_ms,
            "records_per_chunk": w.records_per_chunk,
            "layout_revision": layout.REVISION,
            "cpus": os.cpu_count(),
            "load_1m": round(os.getloadavg()[0], 2),
            "at": {},
        }
        # ten minutes of history before day 1 (at least a chunk and a snapshot)
        base_ms = T0_MS + max(600_000, w.chunk_ms, w.snapshot_ms)
        for d in checkpoints:
            t0 = time.monotonic()
            w.write_until(base_ms + (d - 1) * DAY_MS)
            write_s = time.monotonic() - t0
            full = timed_audit(spec, False, args.spark_master, env)
            s3 = None
            if args.s3_mirror:
                day, noop, s3 = mirrored_day(args, w, spec, base_ms + d * DAY_MS, env)
            else:
                w.write_until(base_ms + d * DAY_MS)
                day = timed_audit(spec, True, args.spark_master, env)
                noop = timed_audit(spec, True, args.spark_master, env)
            out["at"][str(d)] = {
                "objects": w.objects,
                "write_s": round(write_s, 1),
                "load_1m": round(os.getloadavg()[0], 2),
                "full": full,
                "day": day,
                "noop": noop,
                "state_bytes": _state_bytes(store, args.groups),
            }
            if s3 is not None:
                out["at"][str(d)]["s3"] = s3
            print(f"bench history: day {d}: {json.dumps(out['at'][str(d)])}", file=sys.stderr)
        _ratios(out, out["at"][str(checkpoints[0])], out["at"][str(checkpoints[-1])])
        print(json.dumps(out))
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
