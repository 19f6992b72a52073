"""``haproof bench archive --with-store``: the NodeArchiver alone, over a real MessageStore
appending at a fixed rate (no network load generator in the way), shipping to the embedded S3
server."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from tools.bench.archive_load import DRAIN_TIMEOUT_S, SAMPLE_EVERY_S
from tools.bench.archive_stats import lag_figures
from tools.s3server import DUMMY_CREDENTIALS, S3Server


async def _paced_appends(store, archiver, rate_mb_s: float, body: bytes, seconds: float) -> dict:
    from contracts.record.model import Message

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
                **lag_figures(lag_ms, lag_bytes),
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
            archiver = NodeArchiver(store, cfg, "bench-0")

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
