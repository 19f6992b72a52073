"""``haproof bench broker``: send and consume throughput against a broker, one JSON line.

Without ``--namesrv`` it starts a name server and a master (``--role``, ``--flush``) as real
processes on 127.0.0.1 in a temporary directory, then: K asyncio producers send for
``--seconds`` (``broker_load.py``), one consumer group reads everything back, and with a slave
the replication lag is measured (``broker_lag.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from broker import aio
from contracts.errors import HaproofError
from tools.bench.broker_commits import CommitLoad
from tools.bench.broker_lag import LagSampler, ack_history, wait_slave
from tools.bench.broker_load import pct, produce, produce_in_processes
from tools.localcluster import (
    LocalProcess,
    LocalProcessError,
    free_port,
    process_cpu_s,
    start_broker,
    start_namesrv,
    write_broker_conf,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("broker", help="producer/consumer throughput against a broker")
    p.add_argument("--producers", type=int, default=8, help="concurrent producers (asyncio)")
    p.add_argument("--body-bytes", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=10.0, help="how long to send")
    p.add_argument("--role", default="ASYNC_MASTER", choices=["ASYNC_MASTER", "SYNC_MASTER"])
    p.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    p.add_argument(
        "--with-slave",
        action="store_true",
        help="also start a SLAVE process and report replication lag (always on for SYNC_MASTER)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=2,
        help="load-generator processes sharing the producers (0: in this process)",
    )
    p.add_argument(
        "--inflight", type=int, default=16, help="messages in flight per producer (pipelined)"
    )
    p.add_argument("--namesrv", default=None, help="use this running name server instead")
    p.add_argument("--topic", default=None, help="default: a fresh BenchTopic-<id>")
    p.add_argument(
        "--commit-groups",
        type=int,
        default=0,
        help="consumer groups committing every queue of a --commit-queues topic each second",
    )
    p.add_argument("--commit-queues", type=int, default=256)
    p.add_argument(
        "--offset-log",
        default="on",
        choices=["on", "off", "both"],
        help="offsetCommitThroughLog of the started nodes; both: a run with each, off first",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="with --offset-log both: pairs of runs, alternating off/on then on/off (ABBA), "
        "so a machine's changing load falls on both sides; medians reported",
    )
    p.set_defaults(func=run)


def _start_cluster(
    workdir: str, role: str, flush: str, with_slave: bool = False, offset_log: bool = True
) -> tuple[list[LocalProcess], str, str]:
    """Name server, master and optionally a slave: (processes, namesrv addr, master addr); the
    master is ``processes[-2]``."""
    wd = Path(workdir)
    ns = start_namesrv(wd, log_level="WARNING")
    procs = [ns]
    try:
        base = {
            "brokerClusterName": "BenchCluster",
            "brokerName": "bench-a",
            "flushDiskType": flush,
            "namesrvAddr": ns.addr,
            "offsetCommitThroughLog": str(offset_log).lower(),
        }
        port, ha_port = free_port(), free_port()
        conf = write_broker_conf(
            wd / "broker.conf",
            {
                **base,
                "brokerId": 0,
                "brokerRole": role,
                "storePathRootDir": wd / "store",
                "listenPort": port,
                "haListenPort": ha_port,
            },
        )
        br = start_broker("broker", conf, port, wd, log_level="WARNING")
        procs.insert(0, br)
        if with_slave:
            sl_port = free_port()
            sconf = write_broker_conf(
                wd / "slave.conf",
                {
                    **base,
                    "brokerId": 1,
                    "brokerRole": "SLAVE",
                    "storePathRootDir": wd / "store-slave",
                    "listenPort": sl_port,
                    "haListenPort": free_port(),
                    "haMasterAddress": f"127.0.0.1:{ha_port}",
                },
            )
            procs.insert(0, start_broker("slave", sconf, sl_port, wd, log_level="WARNING"))
            asyncio.run(wait_slave(br.addr))
    except BaseException:
        for p in procs:
            p.kill()
        raise
    return procs, ns.addr, br.addr


def _cpu_probe(pid: int):
    return functools.partial(process_cpu_s, pid)


async def _load(
    namesrv: str,
    topic: str,
    producers: int,
    body: bytes,
    seconds: float,
    master: str | None = None,
    processes: int = 0,
    inflight: int = 1,
    broker_cpu_s=None,
    commits: CommitLoad | None = None,
) -> dict:
    from broker.client.producer import Producer

    committing = None
    if commits is not None:  # the commit load runs while the producers send
        await commits.prepare(namesrv)
        commits_done = asyncio.Event()
        committing = asyncio.create_task(commits.run(commits_done))

    sampler = LagSampler(master) if master else None
    sampling_done = asyncio.Event()

    # create the topic first so every producer sees its route
    warm = Producer("bench-warm", [namesrv])
    await warm.send(topic, body, tags="warm")
    await warm.close()
    sampling = asyncio.create_task(sampler.run(sampling_done)) if sampler else None
    broker_cpu0 = broker_cpu_s() if broker_cpu_s else None
    if processes > 0:
        loop = asyncio.get_running_loop()
        sent_figures = await loop.run_in_executor(
            None,
            produce_in_processes,
            namesrv,
            topic,
            producers,
            processes,
            inflight,
            body,
            seconds,
            sampler is not None,
        )
    else:
        sent_figures = await produce(
            namesrv, topic, producers, inflight, body, seconds, sampler is not None
        )
    if committing is not None:
        commits_done.set()
        await committing
    latencies, failed = sent_figures["latencies"], sent_figures["failed"]
    send_s = sent_figures["end"] - sent_figures["start"]
    cpu = _cpu_figures(sent_figures, broker_cpu_s, broker_cpu0)
    lag: dict = {}
    if sampling is not None:
        lag = await _lag_figures(sampler, sampling, sampling_done, sent_figures["acked"], master)
    sent = len(latencies) - failed + 1  # + the warm-up message
    consumed, consume_s = await _consume_all(namesrv, topic, sent)
    return {
        "sent": sent,
        "failed": failed,
        "send_s": round(send_s, 3),
        "msgs_per_s": round((sent - 1) / send_s, 1),
        "p50_send_ms": round(pct(latencies, 0.5) * 1e3, 3),
        "p99_send_ms": round(pct(latencies, 0.99) * 1e3, 3),
        "consumed": consumed,
        "consume_msgs_per_s": round(consumed / consume_s, 1) if consume_s else 0.0,
        **cpu,
        **lag,
        **(commits.figures() if commits is not None else {}),
    }


def _cpu_figures(sent_figures: dict, broker_cpu_s, broker_cpu0: float | None) -> dict:
    """CPU per message does not depend on what else loads the machine: the capacity figures."""
    latencies = sent_figures["latencies"]
    cpu: dict = {}
    if latencies:
        cpu["client_cpu_us_per_msg"] = round(sent_figures["cpu_s"] / len(latencies) * 1e6, 1)
        if broker_cpu0 is not None:
            per_msg = (broker_cpu_s() - broker_cpu0) / len(latencies)
            cpu["broker_cpu_us_per_msg"] = round(per_msg * 1e6, 1)
            cpu["broker_msgs_per_cpu_s"] = round(1 / per_msg, 1) if per_msg > 0 else None
    return cpu


async def _lag_figures(
    sampler: LagSampler, sampling: asyncio.Task, done: asyncio.Event, acked: list, master: str
) -> dict:
    """Stop the sampler once the slave acked every sent message; replication lag figures."""
    sampler.acked = acked
    sampler.max_offset = max((off for _, off in sampler.acked), default=-1)
    done.set()
    try:
        async with asyncio.timeout(60):
            await sampling
    except TimeoutError:
        sampling.cancel()
    history = await ack_history(master)
    lags = sampler.lags_ms(history)
    return {
        "replication_lag_p50_ms": round(pct(lags, 0.5), 3),
        "replication_lag_p99_ms": round(pct(lags, 0.99), 3),
        "replication_lag_samples": len(lags),
        "lag_sample_interval_ms": 0.0 if history else round(sampler.interval_s * 1e3, 1),
        "lag_measured_at": "master ack history" if history else "status polling",
    }


async def _consume_all(namesrv: str, topic: str, sent: int) -> tuple[int, float]:
    """One consumer group reads back until it has ``sent`` messages or 10 s pass idle:
    (consumed, seconds)."""
    from broker.client.consumer import Consumer

    consumer = Consumer(f"bench-cg-{uuid.uuid4().hex[:6]}", [namesrv], topic, max_msg_nums=32)
    consumed = 0
    t0 = time.perf_counter()
    idle_since = time.perf_counter()
    try:
        while consumed < sent and time.perf_counter() - idle_since < 10:
            got = await consumer.poll()
            if got:
                consumed += len(got)
                idle_since = time.perf_counter()
    finally:
        await consumer.close()
    return consumed, time.perf_counter() - t0


def run(args: argparse.Namespace) -> int:
    if args.producers <= 0 or args.seconds <= 0 or args.inflight <= 0 or args.processes < 0:
        raise HaproofError(
            "bench broker: --producers, --seconds and --inflight must be positive, "
            "--processes at least 0"
        )
    if args.repeat <= 0:
        raise HaproofError("bench broker: --repeat must be positive")
    with_slave = (args.with_slave or args.role == "SYNC_MASTER") and not args.namesrv
    if args.offset_log == "both":
        figures = compare_offset_log(lambda on: _one_run(args, with_slave, on), args.repeat)
    else:
        figures = _one_run(args, with_slave, args.offset_log == "on")
    out = {
        "bench": "broker",
        "role": args.role,
        "flush": args.flush,
        "with_slave": with_slave,
        "producers": args.producers,
        "processes": args.processes,
        "inflight": args.inflight,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "body_bytes": args.body_bytes,
        **figures,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(out))
    return 0 if figures["failed"] == 0 and figures["consumed"] >= figures["sent"] else 1


def compare_offset_log(one_run, pairs: int) -> dict:
    """``pairs`` runs with the switch off and as many on, in ABBA order (off, on, on, off, ...);
    the figures of the on run closest to the median, each side's runs, the ratio of the median
    msgs/s (``on_vs_off``) and of the broker's CPU per message (``cpu_on_vs_off``: what a
    message costs the broker does not depend on what else loads the machine)."""
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for i in range(pairs):
        for on in (False, True) if i % 2 == 0 else (True, False):
            runs["on" if on else "off"].append(one_run(on))
    rate = {k: statistics.median(r["msgs_per_s"] for r in v) for k, v in runs.items()}
    cpu = {
        k: statistics.median(r.get("broker_cpu_us_per_msg") or 0 for r in v)
        for k, v in runs.items()
    }
    on_run = min(runs["on"], key=lambda r: abs(r["msgs_per_s"] - rate["on"]))
    return {
        **on_run,
        "offsetLog": {k: v[0] if len(v) == 1 else v for k, v in runs.items()},
        "msgs_per_s_median": rate,
        "on_vs_off": round(rate["on"] / rate["off"], 3) if rate["off"] else 0,
        "cpu_on_vs_off": round(cpu["off"] / cpu["on"], 3) if cpu["on"] else 0,
        "failed": sum(r["failed"] for v in runs.values() for r in v),
        "sent": sum(r["sent"] for v in runs.values() for r in v),
        "consumed": sum(r["consumed"] for v in runs.values() for r in v),
    }


def _one_run(args: argparse.Namespace, with_slave: bool, offset_log: bool) -> dict:
    """One cluster (unless --namesrv), one load; its figures."""
    workdir = tempfile.mkdtemp(prefix="haproof-bench-broker-")
    procs: list[LocalProcess] = []
    master = None
    try:
        if args.namesrv:
            namesrv = args.namesrv
        else:
            procs, namesrv, master = _start_cluster(
                workdir, args.role, args.flush, with_slave, offset_log
            )
        commits = None
        if args.commit_groups > 0 and master is not None:
            commits = CommitLoad(master, args.commit_groups, args.commit_queues)
        topic = args.topic or f"BenchTopic-{uuid.uuid4().hex[:6]}"
        figures = aio.run(
            _load(
                namesrv,
                topic,
                args.producers,
                os.urandom(args.body_bytes),
                args.seconds,
                master if with_slave else None,
                args.processes,
                args.inflight,
                _cpu_probe(procs[-2].proc.pid) if len(procs) >= 2 else None,
                commits,
            )
        )
    finally:
        for p in procs:
            try:
                p.stop(20)
            except LocalProcessError:
                pass  # killed after 20 s; the figures are already taken
        shutil.rmtree(workdir, ignore_errors=True)
    return figures
