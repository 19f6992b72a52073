"""``haproof bench archive --with-broker``: archiving inside a live broker under load.

Starts the embedded S3 server, then for each mode (archiving off, then on) a fresh name server and
ASYNC_MASTER / ASYNC_FLUSH broker process, and drives it with K asyncio producers sending 1 KiB
bodies for S seconds. A sampler asks the broker for its HA status (which carries the archive's
runtime info) every 100 ms: the appended bytes (max offset) and, with archiving on, the archive's
end and lag (bytes, ms). After the load it waits for the archive to catch up.

The load and its sampler: tools/bench/archive_load.py. One JSON line: per mode msgs/s and append MB/s; with archiving on the archive MB/s, lag p50/p99/max
(ms and bytes) while loaded, the time to drain after the load; the on/off throughput ratio; and
whether the targets hold (lag p99 < 2 x archiveIntervalMs at >= 20 MB/s appended, ratio >= 0.9).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from broker import aio
from contracts.errors import HaproofError
from tools.bench.archive_load import drive
from tools.bench.archive_stats import combine_runs, ratio_interval
from tools.localcluster import (
    LocalProcessError,
    child_pids,
    free_port,
    process_cpu_s,
    start_broker,
    start_namesrv,
    write_broker_conf,
)
from tools.s3server import DUMMY_CREDENTIALS, S3Server

S3_NICE = 19  # the embedded S3 server stands in for remote storage: lowest CPU priority


def _started(start, attempts: int = 3):
    """Start a process on a fresh free port; another process may grab the port first."""
    for attempt in range(attempts):
        try:
            return start()
        except LocalProcessError as exc:
            if "address already in use" not in str(exc) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _broker_props(
    workdir: Path,
    namesrv: str,
    on: bool,
    archive_root: str,
    endpoint: str,
    interval_ms: int,
    chunk_max_bytes: int,
) -> dict:
    """broker.conf of the measured ASYNC_MASTER (ports are added per start attempt)."""
    return {
        "brokerClusterName": "BenchCluster",
        "brokerName": "bench-a",
        "brokerId": 0,
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH",
        "storePathRootDir": workdir / "store",
        "namesrvAddr": namesrv,
        "nodeName": "bench-0",
        "mappedFileSizeCommitLog": 128 * 1024 * 1024,
        "archiveEnable": "true" if on else "false",
        "archiveRoot": archive_root,
        "archiveS3Endpoint": endpoint,
        "archiveIntervalMs": interval_ms,
        "archiveChunkMaxBytes": chunk_max_bytes,
    }


def _start_control(bucket: str, endpoint: str, mb_s: float, chunk_max_bytes: int, env: dict):
    """The control run's uploader process at nice 19 (see :func:`control_upload`)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tools.bench.archive_live import "
            "control_upload; control_upload(*sys.argv[1:])",
            f"s3://{bucket}/control-{uuid.uuid4().hex[:6]}",
            endpoint,
            str(mb_s),
            str(chunk_max_bytes),
        ],
        env={**os.environ, **env},
        preexec_fn=lambda: os.nice(19),
    )


def _run_mode(
    server: S3Server,
    bucket: str,
    on: bool,
    producers: int,
    body: bytes,
    seconds: float,
    interval_ms: int,
    chunk_max_bytes: int,
    work_root: str | None = None,
    control_mb_s: float = 0.0,
    archive_to: str = "s3",
) -> dict:
    """One broker run; ``control_mb_s`` > 0: archiving off, and a separate process (nice 19)
    uploads that many MB/s of 8 MiB objects to the same S3 server meanwhile. ``archive_to``
    ``"file"``: the archive is a file:// root in the run's directory instead of the S3 server."""
    workdir = Path(tempfile.mkdtemp(prefix="haproof-bench-archive-live-", dir=work_root))
    env = dict(DUMMY_CREDENTIALS)
    procs = []
    control = None
    try:
        ns = _started(lambda: start_namesrv(workdir, env))
        procs.append(ns)
        archive_root = (
            f"file://{workdir / 'archive'}"
            if archive_to == "file"
            else f"s3://{bucket}/{'on' if on else 'off'}-{uuid.uuid4().hex[:6]}"
        )
        props = _broker_props(
            workdir, ns.addr, on, archive_root, server.endpoint_url, interval_ms, chunk_max_bytes
        )

        def start():
            port = free_port()
            conf = write_broker_conf(
                workdir / "broker.conf", {**props, "listenPort": port, "haListenPort": free_port()}
            )
            return start_broker("broker", conf, port, workdir, env)

        broker = _started(start)
        procs.append(broker)
        pids = {"broker": broker.proc.pid, "s3": server.proc.pid, "loadgen": os.getpid()}
        cpu0 = {k: process_cpu_s(pid) for k, pid in pids.items()}
        # the archiver's child process (archiveInProcess=false), ready before the broker serves;
        # one started again later counts whole
        kids0 = {k: process_cpu_s(k) for k in child_pids(broker.proc.pid)}
        if control_mb_s > 0:
            control = _start_control(
                bucket, server.endpoint_url, control_mb_s, chunk_max_bytes, env
            )
        figures = aio.run(drive(ns.addr, broker.addr, producers, body, seconds, on))
        if control is not None:
            control.kill()
            control.wait()
            figures["control_upload_mb_per_s"] = control_mb_s
        kid_cpu = sum(process_cpu_s(k) - kids0.get(k, 0.0) for k in child_pids(broker.proc.pid))
        # CPU of each process over the send and the drain, per MB appended: what archiving costs
        # wherever it runs (the broker's archiver thread, the S3 server), whatever else loads
        # the machine
        appended_mb = figures["append_mb_per_s"] * figures["send_s"]
        used_s = {k: process_cpu_s(pid) - cpu0[k] for k, pid in pids.items()}
        used_s["archiver"] = kid_cpu
        for k, used in used_s.items():
            figures[f"{k}_cpu_ms_per_mb"] = (
                round(used * 1e3 / appended_mb, 2) if appended_mb else None
            )
        figures["broker_exit"] = broker.stop()
        return figures
    finally:
        if control is not None and control.poll() is None:
            control.kill()
        for p in procs:
            p.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def control_upload(root: str, endpoint: str, mb_s: str, chunk_bytes: str) -> None:
    """The control run's uploader: what the archive sends (one object of ``chunk_bytes`` and a
    small manifest at a time, each a conditional PUT) at ``mb_s``, until killed."""
    import hashlib

    from contracts.object_store import open_store

    store = open_store(root, endpoint_url=endpoint)
    rate, size = float(mb_s) * 1e6, int(chunk_bytes)
    data = os.urandom(size)
    t0, n = time.perf_counter(), 0
    while True:
        ahead = t0 + n * size / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)  # pacing the upload rate
        chunk = bytes(bytearray(data))  # the copy out of the log
        store.put(f"c/{n:08d}.log", chunk, hashlib.sha256(chunk).hexdigest())
        store.put(f"c/{n:08d}.json", b"{}" * 150)
        n += 1


def default_work_root() -> str | None:
    """tmpfs when there is one: on a shared VM the disk's own noise (writeback stalls of the
    broker's mapped files) moves msgs/s by up to 30 % between runs of one mode, which would
    swamp the on/off difference. Both modes run there alike."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run_with_broker(
    producers: int,
    body_bytes: int,
    seconds: float,
    interval_ms: int,
    chunk_max_bytes: int,
    rounds: int = 1,
    work_root: str | None = None,
    control: bool = False,
    archive_to: str = "s3",
) -> dict:
    """``rounds`` off/on pairs in ABBA order (off on, on off, ...), so a drifting machine load
    weighs on both modes alike. ``control``: each round also runs archiving off while another
    process uploads the off run's append MB/s to the same S3 server: what the upload traffic
    itself costs the broker on this machine, whoever sends it. ``archive_to="file"``: archive
    to a file:// root beside each broker's store: what archiving costs with no S3 server
    sharing the cores (the server runs, idle)."""
    if producers <= 0 or seconds <= 0 or interval_ms <= 0 or rounds <= 0:
        raise HaproofError("bench archive: --producers, --seconds, --archive-interval-ms > 0")
    if archive_to not in ("s3", "file"):
        raise HaproofError(f"bench archive: --archive-to is s3 or file, not {archive_to!r}")
    if control and archive_to != "s3":
        raise HaproofError("bench archive: --control uploads to the S3 server; not with file")
    body = os.urandom(body_bytes)
    load_before = os.getloadavg()[0]
    runs: dict[bool, list[dict]] = {False: [], True: []}
    with S3Server.start(nice=S3_NICE) as server:
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        server.create_bucket(bucket)
        controls: list[dict] = []

        def one(on_mode: bool, control_mb_s: float = 0.0) -> dict:
            return _run_mode(
                server,
                bucket,
                on_mode,
                producers,
                body,
                seconds,
                interval_ms,
                chunk_max_bytes,
                work_root,
                control_mb_s,
                archive_to,
            )

        for i in range(rounds):
            for on_mode in (False, True) if i % 2 == 0 else (True, False):
                runs[on_mode].append(one(on_mode))
            if control:
                controls.append(one(False, runs[False][-1]["append_mb_per_s"]))
    off, on = combine_runs(runs[False]), combine_runs(runs[True])
    per_round = [
        round(a["msgs_per_s"] / b["msgs_per_s"], 3) if b["msgs_per_s"] else 0.0
        for a, b in zip(runs[True], runs[False], strict=True)
    ]
    return {
        "bench": "archive",
        "mode": "with-broker",
        "producers": producers,
        "body_bytes": body_bytes,
        "seconds": seconds,
        "archive_interval_ms": interval_ms,
        "chunk_max_bytes": chunk_max_bytes,
        "rounds": rounds,
        "archive_to": archive_to,
        "s3_server_nice": S3_NICE,
        "work_root": work_root or tempfile.gettempdir(),
        **_ratio_figures(off, on, per_round, interval_ms, controls),
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }


def _ratio_figures(
    off: dict, on: dict, per_round: list[float], interval_ms: int, controls: list[dict]
) -> dict:
    """The on/off comparison: per round and pooled ratios, the control runs, the targets."""
    ratio = on["msgs_per_s"] / off["msgs_per_s"] if off["msgs_per_s"] else 0.0
    ci95, verdict = ratio_interval(per_round)
    lag_ok = on.get("drained", False) and on["lag_p99_ms"] < 2 * interval_ms
    control_figures = {}
    if controls:
        ctl = combine_runs(controls)
        control_figures = {
            "control": ctl,
            "control_ratio": round(ctl["msgs_per_s"] / off["msgs_per_s"], 3)
            if off["msgs_per_s"]
            else 0.0,
        }
    return {
        "ratio_per_round": per_round,
        "off": off,
        "on": on,
        "throughput_ratio": round(ratio, 3),
        **control_figures,
        "ratio_median_of_rounds": round(statistics.median(per_round), 3),
        "ratio_ci95": ci95,
        "ratio_vs_0_9": verdict,
        "targets": {
            "append_ge_20_mb_per_s": on["append_mb_per_s"] >= 20,
            "lag_p99_lt_2x_interval": bool(lag_ok),
            "ratio_ge_0_9": ratio >= 0.9,
        },
        "ok": off["failed"] == 0 and on["failed"] == 0 and on.get("drained", False),
    }
