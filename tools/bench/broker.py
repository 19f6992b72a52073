"""``haproof bench broker``: send and consume throughput against a broker, one JSON line.

Without ``--namesrv`` it starts a name server and a master (``--role``, ``--flush``) as real
processes on 127.0.0.1 in a temporary directory, then: K asyncio producers send for
``--seconds`` (one message in flight each), and one consumer group reads everything back.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from broker import aio
from broker.errors import HaproofError
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
    p.set_defaults(func=run)


def _start_cluster(
    workdir: str, role: str, flush: str, with_slave: bool = False
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
        }
        port, ha_port = free_port(), free_port()
        conf = write_broker_conf(
            wd / "broker.conf",
            {**base, "brokerId": 0, "brokerRole": role, "storePathRootDir": wd / "store",
             "listenPort": port, "haListenPort": ha_port},
        )  # fmt: skip
        br = start_broker("broker", conf, port, wd, log_level="WARNING")
        procs.insert(0, br)
        if with_slave:
            sl_port = free_port()
            sconf = write_broker_conf(
                wd / "slave.conf",
                {**base, "brokerId": 1, "brokerRole": "SLAVE",
                 "storePathRootDir": wd / "store-slave", "listenPort": sl_port,
                 "haListenPort": free_port(), "haMasterAddress": f"127.0.0.1:{ha_port}"},
            )  # fmt: skip
            procs.insert(0, start_broker("slave", sconf, sl_port, wd, log_level="WARNING"))
            asyncio.run(_wait_slave(br.addr))
    except BaseException:
        for p in procs:
            p.kill()
        raise
    return procs, ns.addr, br.addr


async def _ha_ack(client, master: str) -> int:
    """The best slave ack offset in the master's HA status (-1: no slave)."""
    from broker.remoting.codes import RequestCode, ResponseCode
    from broker.remoting.command import RemotingCommand

    resp = await client.invoke(
        master, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS), 5000
    )
    if resp.code != ResponseCode.SUCCESS:
        raise HaproofError(f"bench broker: {master} refused GET_BROKER_HA_STATUS: {resp.remark}")
    slaves = json.loads(resp.body).get("slaves") or []
    return max((s["ackOffset"] for s in slaves), default=-1)


async def _ack_history(master: str) -> list[tuple[float, int]]:
    """The master's record of when its best slave ack rose (empty if it keeps none)."""
    from broker.remoting.client import RemotingClient
    from broker.remoting.codes import RequestCode, ResponseCode
    from broker.remoting.command import RemotingCommand

    client = RemotingClient()
    try:
        req = RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS, {"ackHistory": "true"})
        resp = await client.invoke(master, req, 30_000)
    finally:
        await client.close()
    if resp.code != ResponseCode.SUCCESS:
        return []
    return [(float(t), int(o)) for t, o in json.loads(resp.body).get("ackHistory") or []]


async def _wait_slave(master: str, timeout_s: float = 30.0) -> None:
    from broker.remoting.client import RemotingClient

    client = RemotingClient()
    deadline = time.monotonic() + timeout_s
    try:
        while await _ha_ack(client, master) < 0:
            if time.monotonic() > deadline:
                raise HaproofError(f"bench broker: no slave connected to {master}")
            await asyncio.sleep(0.05)
    finally:
        await client.close()


class _LagSampler:
    """Samples the master's best slave ack every ``interval_s``; a sent message's replication
    lag is the first sample covering its physical offset minus its send-ack time."""

    def __init__(self, master: str, interval_s: float = 0.01) -> None:
        self.master, self.interval_s = master, interval_s
        self.samples: list[tuple[float, int]] = []  # (perf_counter s, ack offset), ack rising
        self.acked: list[tuple[float, int]] = []  # (send-ack perf_counter s, phys offset)
        self.max_offset = -1  # the highest acked message's physical offset

    async def run(self, stop: asyncio.Event) -> None:
        from broker.remoting.client import RemotingClient

        client = RemotingClient()
        try:
            while True:
                ack = await _ha_ack(client, self.master)
                self.samples.append((time.perf_counter(), ack))
                if stop.is_set() and ack > self.max_offset:
                    return
                await asyncio.sleep(self.interval_s)
        finally:
            await client.close()

    def lags_ms(self, history: list[tuple[float, int]] | None = None) -> list[float]:
        """Per acked message: when the first ack covering it landed on the master (its own ack
        history when it keeps one: monotonic clock, shared by every process here; else the
        polled samples) minus when its send was acknowledged."""
        import bisect

        points = history or self.samples
        acks = [a for _, a in points]
        lags = []
        for t_ack, off in self.acked:
            i = bisect.bisect_right(acks, off)  # first ack beyond the message's start
            if i < len(points):
                lags.append(max(0.0, points[i][0] - t_ack) * 1e3)
        return lags


def _cpu_probe(pid: int):
    return functools.partial(process_cpu_s, pid)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def _produce(
    namesrv: str,
    topic: str,
    producers: int,
    inflight: int,
    body: bytes,
    seconds: float,
    sample_acks: bool,
    started=None,
) -> dict:
    """``producers`` Producers with ``inflight`` sends each in flight for ``seconds``: send
    latencies, failures and (when ``sample_acks``) (ack time, physical offset) pairs.
    ``started`` (an awaitable) is awaited once the routes are known: the start signal."""
    from broker.client.producer import Producer, SendStatus
    from broker.store.message import parse_message_id

    latencies: list[float] = []
    acked: list[tuple[float, int]] = []
    failed = 0
    ps = [Producer(f"bench-pg-{uuid.uuid4().hex[:6]}", [namesrv]) for _ in range(producers)]
    for p in ps:
        await p.route(topic)
    if started is not None:
        await started
    deadline = time.perf_counter() + seconds

    async def sender(p) -> None:
        nonlocal failed
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                r = await p.send(topic, body, tags="bench")
                ok = r.status is SendStatus.SEND_OK
                if ok and sample_acks:
                    acked.append((time.perf_counter(), parse_message_id(r.offset_msg_id)[2]))
            except HaproofError:
                ok = False
            latencies.append(time.perf_counter() - t0)
            failed += 0 if ok else 1

    t_start = time.perf_counter()
    cpu0 = time.process_time()
    try:
        await asyncio.gather(*(sender(p) for p in ps for _ in range(inflight)))
    finally:
        for p in ps:
            await p.close()
    return {
        "latencies": latencies,
        "failed": failed,
        "acked": acked,
        "start": t_start,
        "end": time.perf_counter(),
        "cpu_s": time.process_time() - cpu0,
    }


def _worker(conn, namesrv, topic, producers, inflight, body, seconds, sample_acks) -> None:
    """A load-generator process: ready → wait for go → send → results back over ``conn``."""

    async def main() -> dict:
        loop = asyncio.get_running_loop()

        async def go() -> None:
            conn.send("ready")
            await loop.run_in_executor(None, conn.recv)

        return await _produce(namesrv, topic, producers, inflight, body, seconds, sample_acks, go())

    try:
        conn.send(aio.run(main()))
    except BaseException as exc:  # reported to the parent, which fails the bench
        conn.send({"error": repr(exc)})
    finally:
        conn.close()


def _produce_in_processes(
    namesrv, topic, producers, processes, inflight, body, seconds, sample_acks
) -> dict:
    """Producers spread over ``processes`` worker processes (spawned: no inherited loop), all
    started together once every worker has its routes; per-process results merged."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    shares = [producers // processes + (i < producers % processes) for i in range(processes)]
    pipes, procs = [], []
    try:
        for share in shares:
            if share == 0:
                continue
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_worker,
                args=(child, namesrv, topic, share, inflight, body, seconds, sample_acks),
                daemon=True,
            )
            proc.start()
            child.close()
            pipes.append(parent)
            procs.append(proc)
        for pipe in pipes:
            msg = pipe.recv()
            if msg != "ready":
                raise HaproofError(f"bench broker: a load process failed: {msg.get('error')}")
        for pipe in pipes:
            pipe.send("go")
        results = [pipe.recv() for pipe in pipes]
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise HaproofError(f"bench broker: load process failed: {errors[0]}")
    return {
        "latencies": [x for r in results for x in r["latencies"]],
        "failed": sum(r["failed"] for r in results),
        "acked": [x for r in results for x in r["acked"]],
        "start": min(r["start"] for r in results),  # perf_counter: system-wide monotonic clock
        "end": max(r["end"] for r in results),
        "cpu_s": sum(r["cpu_s"] for r in results),
    }


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
) -> dict:
    from broker.client.consumer import Consumer
    from broker.client.producer import Producer

    sampler = _LagSampler(master) if master else None
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
            _produce_in_processes,
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
        sent_figures = await _produce(
            namesrv, topic, producers, inflight, body, seconds, sampler is not None
        )
    latencies, failed = sent_figures["latencies"], sent_figures["failed"]
    send_s = sent_figures["end"] - sent_figures["start"]
    # CPU per message does not depend on what else loads the machine: the capacity figures.
    cpu: dict = {}
    if latencies:
        cpu["client_cpu_us_per_msg"] = round(sent_figures["cpu_s"] / len(latencies) * 1e6, 1)
        if broker_cpu0 is not None:
            per_msg = (broker_cpu_s() - broker_cpu0) / len(latencies)
            cpu["broker_cpu_us_per_msg"] = round(per_msg * 1e6, 1)
            cpu["broker_msgs_per_cpu_s"] = round(1 / per_msg, 1) if per_msg > 0 else None
    lag: dict = {}
    if sampling is not None:
        sampler.acked = sent_figures["acked"]
        sampler.max_offset = max((off for _, off in sampler.acked), default=-1)
        sampling_done.set()
        try:
            async with asyncio.timeout(60):
                await sampling
        except TimeoutError:
            sampling.cancel()
        history = await _ack_history(master)
        lags = sampler.lags_ms(history)
        lag = {
            "replication_lag_p50_ms": round(_pct(lags, 0.5), 3),
            "replication_lag_p99_ms": round(_pct(lags, 0.99), 3),
            "replication_lag_samples": len(lags),
            "lag_sample_interval_ms": 0.0 if history else round(sampler.interval_s * 1e3, 1),
            "lag_measured_at": "master ack history" if history else "status polling",
        }
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
        **cpu,
        **lag,
    }


def run(args: argparse.Namespace) -> int:
    if args.producers <= 0 or args.seconds <= 0 or args.inflight <= 0 or args.processes < 0:
        raise HaproofError(
            "bench broker: --producers, --seconds and --inflight must be positive, "
            "--processes at least 0"
        )
    workdir = tempfile.mkdtemp(prefix="haproof-bench-broker-")
    procs: list[LocalProcess] = []
    with_slave = args.with_slave or args.role == "SYNC_MASTER"
    master = None
    try:
        if args.namesrv:
            namesrv = args.namesrv
            with_slave = False  # someone else's cluster: no slave of ours to measure
        else:
            procs, namesrv, master = _start_cluster(workdir, args.role, args.flush, with_slave)
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
            )
        )
    finally:
        for p in procs:
            try:
                p.stop(20)
            except LocalProcessError:
                pass  # killed after 20 s; the figures are already taken
        shutil.rmtree(workdir, ignore_errors=True)
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
