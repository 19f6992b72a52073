"""``haproof bench broker``: the load generator: asyncio producers with sends in flight, in this
process or spread over spawned worker processes started together."""

from __future__ import annotations

import asyncio
import time
import uuid

from broker import aio
from contracts.errors import HaproofError


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def produce(
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
    from contracts.record.ids import parse_message_id

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


def worker(conn, namesrv, topic, producers, inflight, body, seconds, sample_acks) -> None:
    """A load-generator process: ready → wait for go → send → results back over ``conn``."""

    async def main() -> dict:
        loop = asyncio.get_running_loop()

        async def go() -> None:
            conn.send("ready")
            await loop.run_in_executor(None, conn.recv)

        return await produce(namesrv, topic, producers, inflight, body, seconds, sample_acks, go())

    try:
        conn.send(aio.run(main()))
    except BaseException as exc:  # reported to the parent, which fails the bench
        conn.send({"error": repr(exc)})
    finally:
        conn.close()


def produce_in_processes(
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
                target=worker,
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
