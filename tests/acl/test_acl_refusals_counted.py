"""ACL refusals reach the metrics: the refusal counter wraps the request guard, so a send the
ACL refuses (unsigned, or by an account without PUB on the topic) is counted with reason
``acl`` on the broker's Prometheus endpoint, scraped over HTTP."""

from __future__ import annotations

import asyncio

from broker.metrics.exporter import MetricsService
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from tests.acl.acl_files import acl_broker_conf, user
from tests.acl.helpers import run_node, send_v2
from tests.support.scrape import scrape, value


def test_acl_refusals_are_counted(tmp_path):
    async def body(node, client, addr):
        [metrics] = [s for s in node.services if isinstance(s, MetricsService)]
        port = metrics.endpoint.port
        labels = {
            "cluster": "DefaultCluster",
            "request_code": str(int(RequestCode.SEND_MESSAGE_V2)),
        }
        unsigned = await client.invoke(addr, send_v2("OrderTopic"))
        assert unsigned.code == ResponseCode.NO_PERMISSION
        signed = RemotingClient(rpc_hook=user())
        try:
            denied = await signed.invoke(addr, send_v2("SomeoneElsesTopic"))
        finally:
            await signed.close()
        assert denied.code == ResponseCode.NO_PERMISSION
        samples = await asyncio.to_thread(scrape, port)
        assert value(samples, "haproof_requests_refused_total", reason="acl", **labels) == 2

    run_node(
        tmp_path,
        body,
        **acl_broker_conf(tmp_path),
        metricsExporterType="PROM",
        metricsPromExporterPort=0,
    )
