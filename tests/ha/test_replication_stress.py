"""Long fault-injection rounds on the HA link (``pytest -m stress``): random faults under
SYNC_MASTER traffic, then every acknowledged message is on the slave and the logs match."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from broker.client.producer import Producer, SendStatus
from tests.ha.test_replication_process import (
    Cluster,
    assert_identical_logs,
    caught_up,
    check_on,
    connected,
    send,
    wait_for,
)
from tools.faultproxy import FaultProxy

ROUNDS = int(os.environ.get("HAPROOF_HA_STRESS_ROUNDS", "30"))


@pytest.mark.stress
def test_random_ha_link_faults_lose_nothing_acknowledged(tmp_path):
    seed = int(os.environ.get("HAPROOF_HA_STRESS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"HAPROOF_HA_STRESS_SEED={seed}")  # shown on failure: rerun with it
    c = Cluster(tmp_path, role="SYNC_MASTER", syncFlushTimeout=1000)
    try:

        async def main():
            proxy = await FaultProxy.start("127.0.0.1", c.m_ha)
            producer = Producer("PG", [c.ns.addr], retry_times=0)
            acked: list = []
            stop = asyncio.Event()

            async def traffic():
                i = 0
                while not stop.is_set():
                    try:
                        res, body = await send(producer, i, "s")
                    except Exception:  # noqa: BLE001 - failed outright: not acknowledged
                        await asyncio.sleep(0.05)
                        continue
                    if res.status is SendStatus.SEND_OK:
                        acked.append((res, body))
                    i += 1

            async def progress(n: int):
                target = len(acked) + n
                await wait_for(lambda: asyncio.sleep(0, len(acked) >= target), what="traffic")

            try:
                await asyncio.to_thread(c.start_slave, f"127.0.0.1:{proxy.port}")
                await wait_for(lambda: connected(c.master.addr), what="slave connected")
                task = asyncio.create_task(traffic())
                for _ in range(ROUNDS):
                    fault = rng.choice(["drop", "reset", "half_close", "delay", "blackhole"])
                    if fault == "delay":
                        proxy.set_delay_ms(rng.randrange(10, 300))
                    elif fault == "blackhole":
                        proxy.blackhole(True)
                        await asyncio.sleep(rng.uniform(0.1, 1.5))  # how long the hole lasts
                        proxy.blackhole(False)
                        proxy.drop()
                    else:
                        getattr(proxy, fault)()
                    await progress(rng.randrange(5, 40))
                    proxy.set_delay_ms(0)
                stop.set()
                await task
                await wait_for(lambda: caught_up(c.master.addr), what="slave caught up")
                await check_on(c.slave.addr, acked)
            finally:
                stop.set()
                await producer.close()
                await proxy.stop()
            return len(acked)

        n = asyncio.run(main())
        assert n >= ROUNDS * 5, f"seed {seed}"
        c.slave.stop()
        c.master.stop()
        assert_identical_logs(tmp_path)
    finally:
        c.close()
