"""SubscriptionGroupManager: ``config/subscriptionGroup.json``, the node's consumer groups, and
the one writer of it.

RocketMQ's rules: ``find`` is findSubscriptionGroupConfig (an unknown group is created with
SubscriptionGroupConfig's defaults when ``autoCreateSubscriptionGroup``); ``put`` and ``delete``
are updateSubscriptionGroupConfig and deleteSubscriptionGroupConfig (an administrator's
updateSubGroup / deleteSubGroup, each with a new dataVersion); ``replace_from_master`` is
SlaveSynchronize.syncSubscriptionGroupConfig (the master's table and dataVersion when they
differ). Every change is persisted before the call returns.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.store.config_store import TableManager

log = logging.getLogger(__name__)

TABLE_KEY = "subscriptionGroupTable"
DEFAULT_RETRY_MAX_TIMES = 16


def subscription_group_config(group: str) -> dict[str, Any]:
    """RocketMQ SubscriptionGroupConfig defaults."""
    return {
        "groupName": group,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True,
        "retryQueueNums": 1,
        "retryMaxTimes": DEFAULT_RETRY_MAX_TIMES,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }


class SubscriptionGroupManager(TableManager):
    """Build with ``SubscriptionGroupManager.load(path)``; every change persists the file."""

    TABLE_KEY = TABLE_KEY
    MASTER_REQUEST = "GET_ALL_SUBSCRIPTIONGROUP_CONFIG"

    def find(self, group: str, *, auto_create: bool) -> dict[str, Any] | None:
        """The group's config; created with the defaults (persisted) when unknown and
        ``auto_create``; None when unknown and not."""
        sub = self.get(group)
        if sub is None and auto_create:
            sub = subscription_group_config(group)
            self._tables.put(group, sub)
            self.persist()
            log.info("auto-created subscription group %s", group)
        return sub

    def _put_done(self, name: str, config: dict[str, Any]) -> None:
        self.persist()
        log.info("subscription group %s created/updated: %s", name, config)

    def _deleted(self, name: str) -> None:
        self.persist()
        log.info("subscription group %s deleted", name)
