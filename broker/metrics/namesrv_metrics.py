"""What a name server exports (``metricsExporterType=PROM`` in namesrv.conf; RocketMQ's name
server has no exporter, the keys are its broker's): live brokers per cluster and group, topics
routed, refused requests by reason. Read in the name server's event loop."""

from __future__ import annotations

from collections import Counter

from prometheus_client.metrics_core import Metric

from broker.metrics.families import REFUSED, REFUSED_DOC, Families, refusal_rows
from broker.metrics.refusals import Refusals
from broker.namesrv_routes import RouteInfoManager


class NamesrvMetrics:
    def __init__(self, routes: RouteInfoManager, refusals: Refusals, node_id: str) -> None:
        self.routes = routes
        self.refusals = refusals
        self.node_id = node_id

    async def snapshot(self) -> list[Metric]:
        out = Families({"node_type": "namesrv", "node_id": self.node_id})
        live: Counter = Counter()
        for name, data in self.routes.broker_addr_table.items():
            live[(data["cluster"], name)] += len(data["brokerAddrs"])
        out.gauges(
            "haproof_namesrv_brokers",
            "brokers registered and not expired, per cluster and group",
            ("cluster", "broker_set"),
            sorted(live.items()),
        )
        out.gauge(
            "haproof_namesrv_topics", "topics with a route", len(self.routes.topic_queue_table)
        )
        rows = refusal_rows(self.refusals.counts)
        out.counters(REFUSED, REFUSED_DOC, ("request_code", "reason"), rows)
        return out.metrics
