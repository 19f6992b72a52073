"""The SyncStateSet's size on the metrics endpoints, with real processes: a controller and two
brokers in controller mode on 127.0.0.1, each with metricsExporterType=PROM; once the
controller elected a master and the other caught up, the controller's
``haproof_controller_sync_state_set_size`` and the master's ``haproof_sync_state_set_size`` are
2, then 1 after the slave is killed."""

from __future__ import annotations

import asyncio

from tests.support.controller_cluster import ControllerCluster
from tests.support.scrape import scrape, value
from tests.support.waiting import wait_for
from tools.localcluster import free_port


async def _scraped(port: int):
    """The endpoint's samples ({} until it answers), scraped off the event loop (it carries
    the brokers' traffic to the controller)."""
    try:
        return await asyncio.to_thread(scrape, port)
    except OSError:
        return {}


def test_sync_state_set_size_on_the_controller_and_the_master(tmp_path):
    asyncio.run(_scenario(tmp_path))


async def _scenario(tmp_path) -> None:
    ctl_metrics = free_port()
    metrics = {node: free_port() for node in ("a", "b")}
    cluster = await ControllerCluster.start(
        tmp_path,
        nodes=("a", "b"),
        ctl_keys=f"metricsExporterType=PROM\nmetricsPromExporterPort={ctl_metrics}\n",
        per_node={n: {"metricsPromExporterPort": port} for n, port in metrics.items()},
        flushDiskType="ASYNC_FLUSH",
        metricsExporterType="PROM",
    )
    try:

        async def size_on_controller():
            return value(
                await _scraped(ctl_metrics),
                "haproof_controller_sync_state_set_size",
                broker_set="broker-a",
            )

        async def master_role():
            for n, port in metrics.items():
                if value(await _scraped(port), "haproof_broker_role", role="SYNC_MASTER") == 1:
                    return n
            return None

        async def size_on_master(master: str):
            return value(await _scraped(metrics[master]), "haproof_sync_state_set_size")

        await wait_for(
            lambda: _is(size_on_controller(), 2), 60_000, what="both replicas in the SyncStateSet"
        )
        master = await wait_for(master_role, 30_000, what="the elected master's role")
        await wait_for(
            lambda: _is(size_on_master(master), 2), 30_000, what="the master's SyncStateSet"
        )
        samples = await _scraped(ctl_metrics)
        assert value(samples, "haproof_controller_leader", cluster=None) == 1
        assert value(samples, "active_broker_num", broker_set="broker-a") == 2
        slave = next(n for n in metrics if n != master)
        cluster.kill(slave)
        await wait_for(
            lambda: _is(size_on_controller(), 1), 60_000, what="the SyncStateSet to shrink"
        )
    finally:
        await cluster.close()


async def _is(coro, expected) -> bool:
    return await coro == expected
