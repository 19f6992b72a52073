"""What a controller exports (``metricsExporterType=PROM`` in controller.conf, standalone): per
broker set (RocketMQ 5's ``broker_set`` label) the SyncStateSet's size, the master's broker id
and epoch; RocketMQ 5's ``active_broker_num`` (brokers heartbeating this controller); whether
this controller leads; refused requests by reason. Read in the controller's event loop."""

from __future__ import annotations

from collections import Counter

from prometheus_client.metrics_core import Metric

from broker.controller.controller import Controller
from broker.metrics.families import REFUSED, REFUSED_DOC, Families, refusal_rows
from broker.metrics.refusals import Refusals


class ControllerMetrics:
    def __init__(self, controller: Controller, refusals: Refusals, node_id: str) -> None:
        self.controller = controller
        self.refusals = refusals
        self.node_id = node_id

    async def snapshot(self) -> list[Metric]:
        c = self.controller
        out = Families({"node_type": "controller", "node_id": self.node_id})
        out.gauge("haproof_controller_leader", "1 on the leader", 1 if c.log.is_leader() else 0)
        states = sorted(c.sm.tables.sync_states.items())
        labels = ("cluster", "broker_set")
        out.gauges(
            "haproof_controller_sync_state_set_size",
            "replicas in the broker set's SyncStateSet",
            labels,
            [((s.clusterName, name), len(s.syncStateSet)) for name, s in states],
        )
        out.gauges(
            "haproof_controller_master_epoch",
            "the broker set's master epoch",
            labels,
            [((s.clusterName, name), s.masterEpoch) for name, s in states],
        )
        out.gauges(
            "haproof_controller_master_broker_id",
            "the broker set's master (-1: none)",
            labels,
            [((s.clusterName, n), _or_minus_one(s.masterBrokerId)) for n, s in states],
        )
        live = Counter((key[0], key[1]) for key in c.heartbeats.table)
        out.gauges(
            "active_broker_num",
            "brokers heartbeating this controller (RocketMQ 5's name)",
            labels,
            sorted(live.items()),
        )
        rows = refusal_rows(self.refusals.counts)
        out.counters(REFUSED, REFUSED_DOC, ("request_code", "reason"), rows)
        return out.metrics


def _or_minus_one(broker_id: int | None) -> int:
    return -1 if broker_id is None else broker_id
