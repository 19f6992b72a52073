"""``haproof bench archive --with-broker``: archiving inside a live broker under load.

Starts the embedded S3 server, then for each mode (archiving off, then on) a fresh name server and
ASYNC_MASTER / ASYNC_FLUSH broker process, and drives it with K asyncio producers sending 1 KiB
bodies for S seconds. A sampler asks the broker for its HA status (which carries the archive's
runtime info) every 100 ms: the appended bytes (max offset) and, with archiving on, the archive's
end and lag (bytes, ms). After the load it waits for the archive to catch up.

One JSON line: per mode msgs/s and append MB/s; with archiving on the archive MB/s, lag p50/p99/max
(ms and bytes) while loaded, the time to drain after the load; the on/off throughput ratio; and
whether the targets hold (lag p99 < 2 x archiveIntervalMs at >= 20 MB/s appended, ratio >= 0.9).
"""

from __future__ import annotations

import asyncio
import json
import math
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
from broker.errors import HaproofError
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

SAMPLE_EVERY_S = 0.1
S3_NICE = 19  # the embedded S3 server stands in for remote storage: lowest CPU priority
DRAIN_TIMEOUT_S = 120.0


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def _status(client, addr: str) -> dict:
    from broker.remoting.codes import RequestCode, ResponseCode
    from broker.remoting.command import RemotingCommand

    resp = await client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS), 5000
    )
    if resp.code != ResponseCode.SUCCESS:
        raise HaproofError(f"bench archive: HA status from {addr} failed: {resp.remark}")
    return json.loads(resp.body)


async def _drive(namesrv: str, addr: str, producers: int, body: bytes, seconds: float, on: bool):
    from broker.client.producer import Producer, SendStatus
    from broker.remoting.client import RemotingClient

    topic = f"BenchArchive-{uuid.uuid4().hex[:6]}"
    warm = Producer("bench-archive-warm", [namesrv])
    await warm.send(topic, body)
    await warm.close()
    sent = failed = 0
    stop = asyncio.Event()

    async def producer() -> None:
        nonlocal sent, failed
        p = Producer(f"bench-archive-{uuid.uuid4().hex[:6]}", [namesrv])
        try:
            while not stop.is_set():
                try:
                    ok = (await p.send(topic, body)).status is SendStatus.SEND_OK
                except HaproofError:
                    ok = False
                sent += ok
                failed += not ok
        finally:
            await p.close()

    client = RemotingClient()
    samples: list[tuple[float, dict]] = []
    try:
        first = await _status(client, addr)
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(producer()) for _ in range(producers)]
        while time.perf_counter() - t0 < seconds:
            await asyncio.sleep(SAMPLE_EVERY_S)  # the sampling cadence, not a synchronisation
            samples.append((time.perf_counter() - t0, await _status(client, addr)))
        stop.set()
        await asyncio.gather(*tasks)
        send_s = time.perf_counter() - t0
        last = await _status(client, addr)
        drained_at = None
        if on:
            deadline = time.perf_counter() + DRAIN_TIMEOUT_S
            while time.perf_counter() < deadline:
                st = await _status(client, addr)
                if int(st["archiveEnd"]) >= int(last["maxOffset"]):
                    drained_at = time.perf_counter() - t0
                    last_archive = st
                    break
                await asyncio.sleep(SAMPLE_EVERY_S)
    finally:
        await client.close()
    appended = int(last["maxOffset"]) - int(first["maxOffset"])
    out = {
        "sent": sent,
        "failed": failed,
        "send_s": round(send_s, 3),
        "msgs_per_s": round(sent / send_s, 1),
        "append_mb_per_s": round(appended / send_s / 1e6, 2),
    }
    if on:
        lag_ms = [float(s["archiveLagMs"]) for _, s in samples]
        lag_bytes = [float(s["archiveLagBytes"]) for _, s in samples]
        errors = sorted({s["archiveLastError"] for _, s in samples if s["archiveLastError"]})
        out.update(
            {
                "lag_p50_ms": _pct(lag_ms, 0.5),
                "lag_p99_ms": _pct(lag_ms, 0.99),
                "lag_max_ms": max(lag_ms, default=0.0),
                "lag_p50_bytes": _pct(lag_bytes, 0.5),
                "lag_p99_bytes": _pct(lag_bytes, 0.99),
                "drained": drained_at is not None,
                "drain_s": round(drained_at - send_s, 3) if drained_at is not None else None,
                "storage_errors": errors,
            }
        )
        if drained_at is not None:
            archived = int(last_archive["archiveEnd"]) - int(first["archiveEnd"])
            out["archived_bytes"] = archived
            out["archive_mb_per_s"] = round(archived / drained_at / 1e6, 2)
    return out


def _started(start, attempts: int = 3):
    """Start a process on a fresh free port; another process may grab the port first."""
    for attempt in range(attempts):
        try:
            return start()
        except LocalProcessError as exc:
            if "address already in use" not in str(exc) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


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
        props = {
            "brokerClusterName": "BenchCluster",
            "brokerName": "bench-a",
            "brokerId": 0,
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "storePathRootDir": workdir / "store",
            "namesrvAddr": ns.addr,
            "nodeName": "bench-0",
            "mappedFileSizeCommitLog": 128 * 1024 * 1024,
            "archiveEnable": "true" if on else "false",
            "archiveRoot": f"file://{workdir / 'archive'}"
            if archive_to == "file"
            else f"s3://{bucket}/{'on' if on else 'off'}-{uuid.uuid4().hex[:6]}",
            "archiveS3Endpoint": server.endpoint_url,
            "archiveIntervalMs": interval_ms,
            "archiveChunkMaxBytes": chunk_max_bytes,
        }

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
            control = subprocess.Popen(
                [sys.executable, "-c", "import sys; from tools.bench.archive_live import "
                 "control_upload; control_upload(*sys.argv[1:])",
                 f"s3://{bucket}/control-{uuid.uuid4().hex[:6]}", server.endpoint_url,
                 str(control_mb_s), str(chunk_max_bytes)],
                env={**os.environ, **env}, preexec_fn=lambda: os.nice(19),
            )  # fmt: skip
        figures = aio.run(_drive(ns.addr, broker.addr, producers, body, seconds, on))
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

    from broker.archive.object_store import open_store

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


# Student's t, two-sided 95 %, for 1..30 degrees of freedom
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def ratio_interval(per_round: list[float], target: float = 0.9) -> tuple[list[float] | None, str]:
    """A 95 % confidence interval for the on/off ratio from the paired rounds' ratios (a t
    interval on their logarithms, so it stays positive and a ratio and its inverse are treated
    alike), and what it says of ``target``: ``"met"`` (the whole interval at or above it),
    ``"missed"`` (wholly below) or ``"undecided"`` (the noise of these rounds spans it, or
    fewer than two rounds)."""
    logs = [math.log(r) for r in per_round if r > 0]
    if len(logs) < 2 or len(logs) != len(per_round):
        return None, "undecided"
    df = len(logs) - 1
    t = _T975[df - 1] if df <= len(_T975) else 2.0 if df <= 60 else 1.98 if df <= 120 else 1.96
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    lo, hi = math.exp(mean - half), math.exp(mean + half)
    verdict = "met" if lo >= target else "missed" if hi < target else "undecided"
    return [round(lo, 3), round(hi, 3)], verdict


def default_work_root() -> str | None:
    """tmpfs when there is one: on a shared VM the disk's own noise (writeback stalls of the
    broker's mapped files) moves msgs/s by up to 30 % between runs of one mode, which would
    swamp the on/off difference. Both modes run there alike."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _combine(runs: list[dict]) -> dict:
    """Several runs of one mode: totals, mean rates, the worst lag, drained only if all did."""
    out = dict(runs[0])
    if len(runs) == 1:
        return out
    for key in ("sent", "failed", "archived_bytes"):
        if key in out:
            out[key] = sum(r.get(key, 0) for r in runs)
    rates = ("msgs_per_s", "append_mb_per_s", "archive_mb_per_s", "send_s")
    cpus = (
        "broker_cpu_ms_per_mb", "archiver_cpu_ms_per_mb", "s3_cpu_ms_per_mb",
        "loadgen_cpu_ms_per_mb",
    )  # fmt: skip
    for key in rates + cpus:
        if key in out and all(r.get(key) is not None for r in runs):
            out[key] = round(sum(r[key] for r in runs) / len(runs), 3)
    for key in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "lag_p50_bytes", "lag_p99_bytes"):
        if key in out:
            out[key] = max(r[key] for r in runs)
    if "drained" in out:
        out["drained"] = all(r["drained"] for r in runs)
        out["drain_s"] = max((r["drain_s"] or 0.0) for r in runs)
        out["storage_errors"] = sorted({e for r in runs for e in r["storage_errors"]})
    out["broker_exit"] = max(r["broker_exit"] for r in runs)
    return out


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
                server, bucket, on_mode, producers, body, seconds, interval_ms, chunk_max_bytes,
                work_root, control_mb_s, archive_to,
            )  # fmt: skip

        for i in range(rounds):
            for on_mode in (False, True) if i % 2 == 0 else (True, False):
                runs[on_mode].append(one(on_mode))
            if control:
                controls.append(one(False, runs[False][-1]["append_mb_per_s"]))
    off, on = _combine(runs[False]), _combine(runs[True])
    per_round = [
        round(a["msgs_per_s"] / b["msgs_per_s"], 3) if b["msgs_per_s"] else 0.0
        for a, b in zip(runs[True], runs[False], strict=True)
    ]
    ratio = on["msgs_per_s"] / off["msgs_per_s"] if off["msgs_per_s"] else 0.0
    ci95, verdict = ratio_interval(per_round)
    lag_ok = on.get("drained", False) and on["lag_p99_ms"] < 2 * interval_ms
    control_figures = {}
    if control:
        ctl = _combine(controls)
        control_figures = {
            "control": ctl,
            "control_ratio": round(ctl["msgs_per_s"] / off["msgs_per_s"], 3)
            if off["msgs_per_s"]
            else 0.0,
        }
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
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }


# -- the archiver alone: a real store appending at a fixed rate, the real NodeArchiver ----------


class _StoreNode:
    """What NodeArchiver reads of a BrokerNode, around a bare MessageStore (no remoting)."""

    def __init__(self, config, store) -> None:
        self.config = config
        self.store = store
        self.node_name = "bench-0"
        self.epoch = 0
        self.role_listeners: list = []
        self.truncate_listeners: list = []
        self.ha = None
        self.ha_client = None


async def _paced_appends(store, archiver, rate_mb_s: float, body: bytes, seconds: float) -> dict:
    from broker.store.message import Message

    per_s = rate_mb_s * 1e6 / len(body)
    samples: list[dict] = []
    sent = 0
    t0 = time.perf_counter()
    next_sample = SAMPLE_EVERY_S
    start_off = store.max_phy_offset
    while (elapsed := time.perf_counter() - t0) < seconds:
        owed = int(elapsed * per_s) - sent
        last = None
        for i in range(min(owed, 2000)):
            last = store.put_message(Message("BenchArchive", body, queue_id=(sent + i) % 8))
        if last is not None:
            last.result()
            sent += min(owed, 2000)
        if archiver is not None and elapsed >= next_sample:
            samples.append(archiver.runtime_info())
            next_sample += SAMPLE_EVERY_S
        await asyncio.sleep(0.002)  # lets the archiver's snapshot task run; pacing tick
    send_s = time.perf_counter() - t0
    end_off = store.max_phy_offset
    out = {
        "sent": sent,
        "send_s": round(send_s, 3),
        "msgs_per_s": round(sent / send_s, 1),
        "append_mb_per_s": round((end_off - start_off) / send_s / 1e6, 2),
    }
    if archiver is not None:
        drained_at = None
        deadline = time.perf_counter() + DRAIN_TIMEOUT_S
        while time.perf_counter() < deadline:
            if archiver.archived_end >= end_off:
                drained_at = time.perf_counter() - t0
                break
            await asyncio.sleep(SAMPLE_EVERY_S)  # polling cadence while draining
        lag_ms = [float(s["archiveLagMs"]) for s in samples]
        lag_bytes = [float(s["archiveLagBytes"]) for s in samples]
        out.update(
            {
                "lag_p50_ms": _pct(lag_ms, 0.5),
                "lag_p99_ms": _pct(lag_ms, 0.99),
                "lag_max_ms": max(lag_ms, default=0.0),
                "lag_p50_bytes": _pct(lag_bytes, 0.5),
                "lag_p99_bytes": _pct(lag_bytes, 0.99),
                "drained": drained_at is not None,
                "drain_s": round(drained_at - send_s, 3) if drained_at is not None else None,
                "archive_mb_per_s": round(archiver.archived_end / drained_at / 1e6, 2)
                if drained_at
                else None,
                "storage_errors": sorted({s["archiveLastError"] for s in samples} - {""}),
            }
        )
    return out


def run_with_store(
    rate_mb_s: float, body_bytes: int, seconds: float, interval_ms: int, chunk_max_bytes: int
) -> dict:
    """The NodeArchiver over a real MessageStore appending ``rate_mb_s`` (no network load
    generator in the way), shipping to the embedded S3 server."""
    from broker.archive.node_archiver import NodeArchiver
    from broker.config import BrokerConfig
    from broker.store.message_store import MessageStore

    body = os.urandom(body_bytes)
    load_before = os.getloadavg()[0]
    workdir = Path(tempfile.mkdtemp(prefix="haproof-bench-archive-store-"))
    try:
        with S3Server.start() as server:
            bucket = f"bench-{uuid.uuid4().hex[:8]}"
            server.create_bucket(bucket)
            os.environ.update(DUMMY_CREDENTIALS)
            cfg = BrokerConfig(
                store_path_root_dir=str(workdir / "store"),
                mapped_file_size_commit_log=128 * 1024 * 1024,
                archive_enable=True,
                archive_root=f"s3://{bucket}/store",
                archive_s3_endpoint=server.endpoint_url,
                archive_interval_ms=interval_ms,
                archive_chunk_max_bytes=chunk_max_bytes,
            )
            store = MessageStore.open(cfg)
            store.start()
            archiver = NodeArchiver(_StoreNode(cfg, store))

            async def main() -> dict:
                await archiver.start()
                try:
                    return await _paced_appends(store, archiver, rate_mb_s, body, seconds)
                finally:
                    await archiver.stop()

            try:
                figures = asyncio.run(main())
            finally:
                store.shutdown()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "bench": "archive",
        "mode": "with-store",
        "target_append_mb_per_s": rate_mb_s,
        "body_bytes": body_bytes,
        "seconds": seconds,
        "archive_interval_ms": interval_ms,
        "chunk_max_bytes": chunk_max_bytes,
        **figures,
        "targets": {
            "append_ge_20_mb_per_s": figures["append_mb_per_s"] >= 20,
            "lag_p99_lt_2x_interval": bool(
                figures.get("drained") and figures["lag_p99_ms"] < 2 * interval_ms
            ),
        },
        "ok": bool(figures.get("drained")),
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
