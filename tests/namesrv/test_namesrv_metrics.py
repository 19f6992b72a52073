"""The name server's and the controller's Prometheus endpoints (metricsExporterType=PROM in
namesrv.conf / controller.conf) on real processes, scraped over HTTP."""

from __future__ import annotations

import asyncio

from broker.remoting.codes import RequestCode, ResponseCode
from tests.conftest import wait_until
from tests.support.running import invoke, running_group
from tests.support.scrape import scrape, value
from tools.localcluster import LocalProcess, free_port


def test_namesrv_counts_brokers_and_refusals(tmp_path):
    port = free_port()
    conf = {"metricsExporterType": "PROM", "metricsPromExporterPort": port}
    with running_group(tmp_path, namesrv_conf=conf) as g:
        samples = scrape(port)
        assert value(samples, "haproof_namesrv_brokers", broker_set="broker-a") == 1
        code = str(int(RequestCode.GET_ROUTEINFO_BY_TOPIC))
        labels = {"cluster": None, "request_code": code, "reason": "topic_not_exist"}
        before = value(samples, "haproof_requests_refused_total", **labels) or 0
        for _ in range(2):
            resp = asyncio.run(
                invoke(g.ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"})
            )
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert value(scrape(port), "haproof_requests_refused_total", **labels) == before + 2
        g.m.stop()  # the broker leaves: its registration goes with its connection
        wait_until(
            lambda: not value(scrape(port), "haproof_namesrv_brokers", broker_set="broker-a"),
            30,
            "the broker gone",
        )


def test_controller_serves_its_tables(tmp_path):
    port, metrics = free_port(), free_port()
    conf = tmp_path / "controller.conf"
    conf.write_text(
        f"listenPort={port}\ncontrollerStorePath={tmp_path / 'ctl'}\n"
        f"metricsExporterType=PROM\nmetricsPromExporterPort={metrics}\n"
    )
    ctl = LocalProcess.start(
        "controller", ["controller", "-c", str(conf)], port, tmp_path / "controller.log"
    )
    try:
        samples = scrape(metrics)
        assert value(samples, "haproof_controller_leader", cluster=None) == 1
        assert (
            f"Prometheus metrics on http://127.0.0.1:{metrics}/metrics"
            in (tmp_path / "controller.log").read_text()
        )
    finally:
        assert ctl.stop() == 0


def test_a_controller_embedded_in_the_name_server_is_on_its_endpoint(tmp_path):
    port, metrics = free_port(), free_port()
    conf = tmp_path / "namesrv.conf"
    conf.write_text(
        f"listenPort={port}\nenableControllerInNamesrv=true\n"
        f"controllerStorePath={tmp_path / 'ctl'}\n"
        f"metricsExporterType=PROM\nmetricsPromExporterPort={metrics}\n"
    )
    ns = LocalProcess.start("namesrv", ["namesrv", "-c", str(conf)], port, tmp_path / "namesrv.log")
    try:
        samples = scrape(metrics)
        assert value(samples, "haproof_controller_leader", cluster=None) == 1
        names = {name for name, _ in samples}
        assert any(n.startswith("haproof_namesrv_") for n in names), sorted(names)  # and its own
    finally:
        assert ns.stop() == 0
