"""The SyncStateSet's size on the metrics endpoints, with real processes: a controller and two
brokers in controller mode on 127.0.0.1, each with metricsExporterType=PROM; once the
controller elected a master and the other caught up, the controller's
``haproof_controller_sync_state_set_size`` and the master's ``haproof_sync_state_set_size`` are
2, then 1 after the slave is killed."""

from __future__ import annotations

from tests.conftest import wait_until
from tests.controller.support import start_controller
from tests.support.cluster import node_conf
from tests.support.scrape import scrape, value
from tools.localcluster import free_port, start_broker, start_namesrv


def _scraped(port: int):
    try:
        return scrape(port)
    except OSError:
        return {}


def test_sync_state_set_size_on_the_controller_and_the_master(tmp_path):
    ctl_port, ctl_metrics = free_port(), free_port()
    ctl = start_controller(
        tmp_path,
        "ctl",
        ctl_port,
        f"metricsExporterType=PROM\nmetricsPromExporterPort={ctl_metrics}\n",
    )
    ns = start_namesrv(tmp_path)
    procs, metrics = {}, {}
    try:
        for node in ("a", "b"):
            port, metrics[node] = free_port(), free_port()
            conf = node_conf(
                tmp_path,
                node,
                0,
                "SYNC_MASTER",
                port,
                free_port(),
                ns.addr,
                enableControllerMode="true",
                controllerAddr=f"127.0.0.1:{ctl_port}",
                brokerHeartbeatInterval=300,
                controllerHeartBeatTimeoutMills=3000,
                controllerLeaseMills=2000,
                syncBrokerMetadataPeriod=500,
                haSendHeartbeatInterval=300,
                metricsExporterType="PROM",
                metricsPromExporterPort=metrics[node],
            )
            procs[node] = start_broker(node, conf, port, tmp_path)

        def size_on_controller():
            return value(
                _scraped(ctl_metrics),
                "haproof_controller_sync_state_set_size",
                broker_set="broker-a",
            )

        wait_until(lambda: size_on_controller() == 2, 60, "both replicas in the SyncStateSet")
        master = wait_until(
            lambda: next(
                (
                    n
                    for n in procs
                    if value(_scraped(metrics[n]), "haproof_broker_role", role="SYNC_MASTER") == 1
                ),
                None,
            ),
            30,
            "the elected master's role",
        )
        wait_until(
            lambda: value(_scraped(metrics[master]), "haproof_sync_state_set_size") == 2,
            30,
            "the master's SyncStateSet",
        )
        samples = _scraped(ctl_metrics)
        assert value(samples, "haproof_controller_leader", cluster=None) == 1
        assert value(samples, "active_broker_num", broker_set="broker-a") == 2
        slave = next(n for n in procs if n != master)
        procs[slave].kill()
        wait_until(lambda: size_on_controller() == 1, 60, "the SyncStateSet to shrink")
    finally:
        for p in procs.values():
            p.kill()
        ns.kill()
        ctl.stop()
