"""The request handlers only mqadmin's verbs use (issue #27), gathered for the node factory
(broker/node.py): each processor is given only the collaborators it uses."""

from __future__ import annotations

from broker.processors.admin import ConsumerManager
from broker.processors.connections import ConnectionListProcessor
from broker.processors.group_admin import SubscriptionGroupAdminProcessor
from broker.processors.message_query import MessageQueryProcessor
from broker.processors.message_view import MessageViewProcessor
from broker.processors.runtime import BrokerStats
from broker.processors.stats_view import StatsViewProcessor
from broker.processors.topic_admin import TopicDeleteProcessor
from broker.registration import NamesrvRegistration
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState


def mqadmin_handlers(
    store: MessageStore,
    role: BrokerRoleState,
    registration: NamesrvRegistration,
    consumers: ConsumerManager,
    stats: BrokerStats,
) -> dict[int, object]:
    """Topic deletion (215, topic_admin.py), group admin (200, 207, group_admin.py) and a
    message by its offset msgId (33, message_view.py), by key (12, message_query.py), a
    group's connections (203, 204, connections.py), statsAll's figures (300, 315,
    stats_view.py)."""
    return {
        **TopicDeleteProcessor(store.topic_config, role, registration).handlers(),
        **SubscriptionGroupAdminProcessor(store.subscription_groups, role).handlers(),
        **MessageViewProcessor(store).handlers(),
        **MessageQueryProcessor(store).handlers(),
        **ConnectionListProcessor(consumers).handlers(),
        **StatsViewProcessor(stats, store, consumers).handlers(),
    }
