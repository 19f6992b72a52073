"""What a broker node exports (``metricsExporterType=PROM`` in broker.conf): RocketMQ 5's
names where it has the figure (``rocketmq_messages_in_total``, ``rocketmq_throughput_in_total``,
``rocketmq_messages_out_total``, ``rocketmq_topic_number``), rocketmq-exporter's where it has
them (``rocketmq_brokeruntime_put_tps10``, ``rocketmq_brokeruntime_commitlog_maxoffset``,
``rocketmq_producer_offset``, ``rocketmq_consumer_offset``, ``rocketmq_group_diff``...), and
``haproof_*`` for what neither has: replication lag per slave, the SyncStateSet's size, the
archive's lag, refused requests by reason, the node's role and epoch.

Every figure is read in the node's event loop at scrape time, from the parts that own it (the
store, ``BrokerStats``, the HA service's status, the services' runtime info)."""

from __future__ import annotations

from prometheus_client.metrics_core import Metric

from broker.ha.role_services import RoleServices
from broker.live_config import LiveConfig
from broker.metrics.exporter import MetricsService
from broker.metrics.families import REFUSED, REFUSED_DOC, Families, refusal_rows
from broker.metrics.refusals import Refusals
from broker.node_service import RuntimeInfoTable
from broker.processors.runtime import TPS_WINDOWS_S, BrokerStats
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState

# runtime info keys (the services') exported as gauges: key -> (name, help, scale)
INFO_GAUGES = {
    "archiveLagBytes": ("haproof_archive_lag_bytes", "flushed bytes not yet archived", 1),
    "archiveLagMs": ("haproof_archive_lag_seconds", "age of the oldest unarchived byte", 1e-3),
    "archiveChunks": ("haproof_archive_chunks_total", "chunks shipped since start", 1),
    "haConfirmOffset": ("haproof_ha_confirm_offset", "offset every in-sync slave acked", 1),
    "haConnected": ("haproof_ha_connected", "a slave's HA connection to its master is up", 1),
    "controllerFenced": ("haproof_write_fenced", "1 while the master lease fences writes", 1),
    "controllerSyncStateSetSize": (
        "haproof_sync_state_set_size",
        "replicas in the SyncStateSet (controller mode)",
        1,
    ),
}


class BrokerMetrics:
    """The broker's scrape: ``snapshot()`` runs in the node's loop (``LoopCollector``)."""

    def __init__(
        self,
        store: MessageStore,
        config: LiveConfig,
        role: BrokerRoleState,
        stats: BrokerStats,
        info: RuntimeInfoTable,
        replication: RoleServices,
        refusals: Refusals,
        node_name: str,
    ) -> None:
        self.store = store
        self.config = config
        self.role = role
        self.stats = stats
        self.info = info
        self.replication = replication
        self.refusals = refusals
        self.node_name = node_name

    async def snapshot(self) -> list[Metric]:
        identity = {
            "cluster": self.config.broker_cluster_name,
            "node_type": "broker",
            "node_id": self.node_name,
        }
        out = Families(identity)
        self._traffic(out)
        self._offsets(out)
        self._replication(out)
        values = self.info.values()
        for key, (name, doc, scale) in INFO_GAUGES.items():
            if isinstance(values.get(key), int | float):  # bool is an int: 0/1
                out.gauge(name, doc, float(values[key]) * scale)
        out.counters(
            REFUSED, REFUSED_DOC, ("request_code", "reason"), refusal_rows(self.refusals.counts)
        )
        return out.metrics

    def _traffic(self, out: Families) -> None:
        stats = self.stats
        by_topic = sorted(stats.put_by_topic.items())
        out.counters(
            "rocketmq_messages_in_total",
            "messages put",
            ("topic",),
            [((t,), n) for t, (n, _b) in by_topic],
        )
        out.counters(
            "rocketmq_throughput_in_total",
            "message bytes put",
            ("topic",),
            [((t,), b) for t, (_n, b) in by_topic],
        )
        out.counters(
            "rocketmq_messages_out_total",
            "messages handed to consumers",
            (),
            [((), stats.get_transferred)],
        )
        for index, kind in ((1, "put"), (4, "gettransfered")):
            for window_s, tps in zip(TPS_WINDOWS_S, stats.tps(index), strict=True):
                out.gauge(
                    f"rocketmq_brokeruntime_{kind}_tps{window_s}",
                    f"{kind} TPS over {window_s} s",
                    tps,
                )

    def _offsets(self, out: Families) -> None:
        store = self.store
        out.gauge(
            "rocketmq_brokeruntime_commitlog_maxoffset", "commit log end", store.max_phy_offset
        )
        out.gauge(
            "rocketmq_brokeruntime_commitlog_minoffset", "commit log start", store.min_phy_offset
        )
        out.gauge(
            "rocketmq_brokeruntime_dispatch_behind_bytes",
            "commit log bytes not yet in consume queues",
            max(0, store.max_phy_offset - store.dispatched_offset),
        )
        topics = store.topic_config.table
        out.gauge("rocketmq_topic_number", "topics", len(topics))
        ends: dict[str, int] = {}
        for topic, tc in sorted(topics.items()):
            queues = int(tc.get("readQueueNums", 0) or 0)
            ends[topic] = sum(store.get_max_offset_in_queue(topic, q) for q in range(queues))
        out.gauges(
            "rocketmq_producer_offset",
            "sum of the topic's queue end offsets",
            ("topic",),
            [((t,), end) for t, end in ends.items()],
        )
        consumer, diff = [], []
        for key, queues in sorted(store.consumer_offsets.table.items()):
            topic, _, group = key.partition("@")
            committed = sum(queues.values())
            behind = sum(
                max(0, store.get_max_offset_in_queue(topic, q) - off) for q, off in queues.items()
            )
            consumer.append(((topic, group), committed))
            diff.append(((topic, group), behind))
        doc = "sum of the group's committed offsets in the topic"
        out.gauges("rocketmq_consumer_offset", doc, ("topic", "group"), consumer)
        doc = "messages the group has not consumed yet (queue end - committed)"
        out.gauges("rocketmq_group_diff", doc, ("topic", "group"), diff)

    def _replication(self, out: Families) -> None:
        out.gauges(
            "haproof_broker_role",
            "1 on the series of the node's current role",
            ("role",),
            [((self.role.role.value,), 1)],
        )
        out.gauge("haproof_broker_epoch", "the node's epoch", self.role.epoch)
        ha = self.replication.ha
        slaves = ha.status()["slaves"] if ha is not None else []
        rows = [
            (((s["node"] or s["addr"]), s["brokerId"] if s["brokerId"] is not None else -1), s)
            for s in slaves
        ]
        out.gauges(
            "haproof_ha_slave_lag_bytes",
            "master end offset minus the slave's acked offset",
            ("slave", "slave_broker_id"),
            [(labels, s["diff"]) for labels, s in rows],
        )
        out.gauges(
            "haproof_ha_slave_ack_offset",
            "the slave's acked commit log offset",
            ("slave", "slave_broker_id"),
            [(labels, s["ackOffset"]) for labels, s in rows],
        )
        out.gauges(
            "haproof_ha_slave_in_sync",
            "1 while the slave is within haSlaveFallbehindMax",
            ("slave", "slave_broker_id"),
            [(labels, 1 if s["inSync"] else 0) for labels, s in rows],
        )


def broker_metrics_service(
    store: MessageStore,
    config: LiveConfig,
    role: BrokerRoleState,
    stats: BrokerStats,
    info: RuntimeInfoTable,
    replication: RoleServices,
    refusals: Refusals,
    *,
    node_name: str,
) -> MetricsService:
    metrics = BrokerMetrics(store, config, role, stats, info, replication, refusals, node_name)
    return MetricsService(f"broker {node_name}", config.metrics, metrics.snapshot)
