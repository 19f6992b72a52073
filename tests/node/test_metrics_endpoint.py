"""The metrics endpoint's bounds and its refusal reasons, in process: at most MAX_SCRAPES
connections at once (one more is closed unanswered), an idle connection dropped after
READ_TIMEOUT_S, figures computed in the event loop; each refusal's remark, as its owner
writes it, read as its reason."""

from __future__ import annotations

import asyncio
import socket
import urllib.request

import pytest
from prometheus_client.metrics_core import GaugeMetricFamily

from broker.metrics import exporter
from broker.metrics.exporter import MetricsExporterType, MetricsService, MetricsSettings
from broker.metrics.refusals import refusal_reason
from broker.remoting.codes import ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import ConfigError
from tests.conftest import wait_until

PROM = MetricsSettings(MetricsExporterType.PROM, "", 0)


def _get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def _refused(port: int) -> bool:
    """A scrape that gets no answer (closed at once)."""
    try:
        _get(port)
    except OSError:
        return True
    return False


def test_scrapes_are_bounded_and_idle_connections_dropped(monkeypatch):
    monkeypatch.setattr(exporter, "READ_TIMEOUT_S", 3.0)
    monkeypatch.setattr(exporter._Handler, "timeout", 3.0)
    threads = []

    async def snapshot():
        threads.append(asyncio.get_running_loop())
        g = GaugeMetricFamily("haproof_test_value", "a test figure")
        g.add_metric([], 42)
        return [g]

    async def main():
        service = MetricsService("test", PROM, snapshot)
        await service.start()
        port = service.endpoint.port
        try:
            assert "haproof_test_value 42.0" in await asyncio.to_thread(_get, port)
            assert threads == [asyncio.get_running_loop()]  # read in the loop, not the thread
            idle = [
                socket.create_connection(("127.0.0.1", port)) for _ in range(exporter.MAX_SCRAPES)
            ]
            try:
                await asyncio.to_thread(wait_until, lambda: _refused(port), 10, "a refusal")
                # the idle ones time out and free their slots
                await asyncio.to_thread(wait_until, lambda: not _refused(port), 10, "a slot")
            finally:
                for s in idle:
                    s.close()
        finally:
            await service.stop()

    asyncio.run(main())


def test_the_endpoint_binds_to_loopback_by_default_and_a_busy_port_is_one_line():
    assert MetricsSettings().bind_host == "127.0.0.1"
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        settings = MetricsSettings(MetricsExporterType.PROM, "", busy.getsockname()[1])

        async def main():
            with pytest.raises(ConfigError, match="cannot serve metrics on 127.0.0.1:"):
                await MetricsService("test", settings, lambda: None).start()

        asyncio.run(main())
    finally:
        busy.close()


@pytest.mark.parametrize(
    ("code", "remark", "reason"),
    [
        (ResponseCode.NO_PERMISSION, "ACL: no account for accessKey 'x'", "acl"),
        (ResponseCode.NO_PERMISSION, "the topic[T] sending is forbidden", "permission"),
        (
            ResponseCode.SERVICE_NOT_AVAILABLE,
            "service not available now: the broker's disk is full (no space)",
            "disk_full",
        ),
        (
            ResponseCode.SERVICE_NOT_AVAILABLE,
            "master lease of 8000 ms ended: no heartbeat acknowledged by the controller leader",
            "lease_fence",
        ),
        (ResponseCode.SERVICE_NOT_AVAILABLE, "no role from the controller yet", "no_role"),
        (ResponseCode.SERVICE_NOT_AVAILABLE, "a slave takes no writes", "not_master"),
        (ResponseCode.SYSTEM_BUSY, "too many brokers heartbeating", "flow_control"),
        (ResponseCode.FLUSH_SLAVE_TIMEOUT, None, "flush_slave_timeout"),
        (ResponseCode.SUCCESS, None, None),
        (ResponseCode.PULL_NOT_FOUND, None, None),
        (ResponseCode.QUERY_NOT_FOUND, None, None),
    ],
)
def test_refusal_reasons(code, remark, reason):
    req = RemotingCommand.request(310)
    assert refusal_reason(req.make_response(code, remark=remark)) == reason
