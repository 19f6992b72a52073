"""``haproof bench broker``: send and consume throughput against a broker, one JSON line.

Without ``--namesrv`` it starts a name server and a master (``--role``, ``--flush``) as real
processes on 127.0.0.1 in a temporary directory, then: K asyncio producers send for
``--seconds`` (one message in flight each), and one consumer group reads everything back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from broker.errors import HaproofError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("broker", help="producer/consumer throughput against a broker")
    p.add_argument("--producers", type=int, default=8, help="concurrent producers (asyncio)")
    p.add_argument("--body-bytes", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=10.0, help="how long to send")
    p.add_argument("--role", default="ASYNC_MASTER", choices=["ASYNC_MASTER", "SYNC_MASTER"])
    p.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    p.add_argument("--namesrv", default=None, help="use this running name server instead")
    p.add_argument("--topic", default=None, help="default: a fresh BenchTopic-<id>")
    p.set_defaults(func=run)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(proc: subprocess.Popen, port: int, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise HaproofError(f"bench broker: {what} exited with {proc.returncode}") from None
            if time.monotonic() > deadline:
                raise HaproofError(f"bench broker: {what} did not listen on {port}") from None
            time.sleep(0.05)


def _start_cluster(workdir: str, role: str, flush: str) -> tuple[list[subprocess.Popen], str]:
    ns_port, br_port = _free_port(), _free_port()
    cli = [sys.executable, "-m", "broker.cli", "--log-level", "WARNING"]
    logs = open(os.path.join(workdir, "processes.log"), "wb")  # noqa: SIM115
    ns = subprocess.Popen(
        [*cli, "namesrv", "--host", "127.0.0.1", "--listen-port", str(ns_port)], stderr=logs
    )
    _wait_port(ns, ns_port, "namesrv")
    conf = os.path.join(workdir, "broker.conf")
    with open(conf, "w") as fh:
        fh.write(
            "brokerClusterName=BenchCluster\nbrokerName=bench-a\nbrokerId=0\n"
            f"brokerRole={role}\nflushDiskType={flush}\n"
            f"storePathRootDir={os.path.join(workdir, 'store')}\nlistenPort={br_port}\n"
            f"namesrvAddr=127.0.0.1:{ns_port}\n"
        )
    br = subprocess.Popen([*cli, "broker", "-c", conf], stderr=logs)
    _wait_port(br, br_port, "broker")
    return [br, ns], f"127.0.0.1:{ns_port}"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def _load(namesrv: str, topic: str, producers: int, body: bytes, seconds: float) -> dict:
    from broker.client.consumer import Consumer
    from broker.client.producer import Producer, SendStatus

    latencies: list[float] = []
    failed = 0

    async def producer() -> None:
        nonlocal failed
        p = Producer(f"bench-pg-{uuid.uuid4().hex[:6]}", [namesrv])
        deadline = time.perf_counter() + seconds
        try:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    r = await p.send(topic, body, tags="bench")
                    ok = r.status is SendStatus.SEND_OK
                except HaproofError:
                    ok = False
                latencies.append(time.perf_counter() - t0)
                failed += 0 if ok else 1
        finally:
            await p.close()

    # create the topic first so every producer sees its route
    warm = Producer("bench-warm", [namesrv])
    await warm.send(topic, body, tags="warm")
    await warm.close()
    t0 = time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(producers)))
    send_s = time.perf_counter() - t0
    sent = len(latencies) - failed + 1  # + the warm-up message

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
    consume_s = time.perf_counter() - t0
    return {
        "sent": sent,
        "failed": failed,
        "send_s": round(send_s, 3),
        "msgs_per_s": round((sent - 1) / send_s, 1),
        "p50_send_ms": round(_pct(latencies, 0.5) * 1e3, 3),
        "p99_send_ms": round(_pct(latencies, 0.99) * 1e3, 3),
        "consumed": consumed,
        "consume_msgs_per_s": round(consumed / consume_s, 1) if consume_s else 0.0,
    }


def run(args: argparse.Namespace) -> int:
    if args.producers <= 0 or args.seconds <= 0:
        raise HaproofError("bench broker: --producers and --seconds must be positive")
    workdir = tempfile.mkdtemp(prefix="haproof-bench-broker-")
    procs: list[subprocess.Popen] = []
    try:
        if args.namesrv:
            namesrv = args.namesrv
        else:
            procs, namesrv = _start_cluster(workdir, args.role, args.flush)
        topic = args.topic or f"BenchTopic-{uuid.uuid4().hex[:6]}"
        figures = asyncio.run(
            _load(namesrv, topic, args.producers, os.urandom(args.body_bytes), args.seconds)
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    out = {
        "bench": "broker",
        "role": args.role,
        "flush": args.flush,
        "producers": args.producers,
        "body_bytes": args.body_bytes,
        **figures,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(out))
    return 0 if figures["failed"] == 0 and figures["consumed"] >= figures["sent"] else 1
