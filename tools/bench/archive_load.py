"""``haproof bench archive --with-broker``'s load on one broker: K producers sending a body for
S seconds while a sampler asks the broker for its HA status (which carries the archive's runtime
info) every ``SAMPLE_EVERY_S``; then, with archiving on, the wait for the archive to catch up.
Its figures: msgs/s, append MB/s and, with archiving on, the archive's lag, drain and MB/s
(tools/bench/archive_live.py runs it per mode)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from contracts.errors import HaproofError
from tools.bench.archive_stats import lag_figures

SAMPLE_EVERY_S = 0.1
DRAIN_TIMEOUT_S = 120.0


async def _status(client, addr: str) -> dict:
    from broker.remoting.codes import RequestCode, ResponseCode
    from broker.remoting.command import RemotingCommand

    resp = await client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS), 5000
    )
    if resp.code != ResponseCode.SUCCESS:
        raise HaproofError(f"bench archive: HA status from {addr} failed: {resp.remark}")
    return json.loads(resp.body)


async def drive(namesrv: str, addr: str, producers: int, body: bytes, seconds: float, on: bool):
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
                **lag_figures(lag_ms, lag_bytes),
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
