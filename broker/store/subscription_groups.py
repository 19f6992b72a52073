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

from broker.store.config_store import TableConfig

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


class SubscriptionGroupManager:
    """Build with ``SubscriptionGroupManager.load(path)``."""

    def __init__(self, tables: TableConfig) -> None:
        self._tables = tables

    @classmethod
    def load(cls, path: str) -> SubscriptionGroupManager:
        return cls(TableConfig.load(path, TABLE_KEY))

    def get(self, group: str) -> dict[str, Any] | None:
        return self._tables.table.get(group)

    def __contains__(self, group: object) -> bool:
        return group in self._tables.table

    @property
    def table(self) -> dict[str, dict[str, Any]]:
        """Group -> config: a copy of the table (the configs in it are the stored ones: read
        them; change them through the methods below)."""
        return dict(self._tables.table)

    @property
    def data_version(self) -> dict[str, int]:
        return self._tables.data_version

    def to_json(self) -> dict[str, Any]:
        return self._tables.to_json()

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

    def put(self, group: str, config: dict[str, Any]) -> None:
        """Create or replace ``group``'s config (updateSubscriptionGroupConfig), persisted."""
        self._tables.put(group, config)
        self.persist()
        log.info("subscription group %s created/updated: %s", group, config)

    def delete(self, group: str) -> bool:
        """Remove ``group``'s config, persisted; False when it had none."""
        if self._tables.table.pop(group, None) is None:
            return False
        self._tables.next_version()
        self.persist()
        log.info("subscription group %s deleted", group)
        return True

    def replace_from_master(self, doc: Any) -> bool:
        """The master's GET_ALL_SUBSCRIPTIONGROUP_CONFIG document replaces ours when its table
        differs (persisted); True then. ValueError names a malformed document."""
        if not self._tables.replace(doc, "GET_ALL_SUBSCRIPTIONGROUP_CONFIG"):
            return False
        self.persist()
        return True

    def persist(self) -> None:
        self._tables.persist()
