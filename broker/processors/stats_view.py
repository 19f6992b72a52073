"""What ``mqadmin statsAll`` asks a master: VIEW_BROKER_STATS_DATA (315,
ViewBrokerStatsDataRequestHeader ``statsName``, ``statsKey``) answers BrokerStatsData's JSON
(``statsMinute`` / ``statsHour`` / ``statsDay``, each ``sum``, ``tps``, ``avgpt``) for
``TOPIC_PUT_NUMS`` (key: a topic) or ``GROUP_GET_NUMS`` (key: ``topic@group``), or SYSTEM_ERROR
``The stats <name> <key> not exist``; QUERY_TOPIC_CONSUME_BY_WHO (300, ``topic``) answers
GroupList's JSON, the groups with committed offsets in the topic or online consumers subscribed
to it (RocketMQ's consumerManager + consumerOffsetManager.whichGroupByTopic)."""

from __future__ import annotations

import json

from broker.processors.admin import ConsumerManager
from broker.processors.runtime import BrokerStats
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore

STATS_NAMES = ("TOPIC_PUT_NUMS", "GROUP_GET_NUMS")


class StatsViewProcessor:
    def __init__(self, stats: BrokerStats, store: MessageStore, consumers: ConsumerManager) -> None:
        self.stats = stats
        self.store = store
        self.consumers = consumers

    def handlers(self) -> dict[int, object]:
        return {
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_stats,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
        }

    async def view_stats(self, conn, req: RemotingCommand) -> RemotingCommand:
        name, key = req.field("statsName"), req.field("statsKey")
        stats = self.stats
        table = {"TOPIC_PUT_NUMS": stats.topic_puts, "GROUP_GET_NUMS": stats.group_gets}.get(name)
        doc = None if table is None else table.windows(key, stats.clock_ms())
        if doc is None:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"The stats <{name}> <{key[:256]}> not exist"
            )
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(doc).encode())

    async def consumed_by(self, conn, req: RemotingCommand) -> RemotingCommand:
        topic = req.field("topic")
        groups = {
            g
            for t, _, g in (k.partition("@") for k in self.store.consumer_offsets.table)
            if t == topic
        }
        for group, members in self.consumers.groups.items():
            if any(topic in info.subscriptions for info in members.values()):
                groups.add(group)
        body = {"groupList": sorted(groups)}
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(body).encode())
