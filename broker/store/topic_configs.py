"""TopicConfigManager: ``config/topics.json``, the node's topics, and the one writer of it.

RocketMQ's rules, as its TopicConfigManager has them:

- ``ensure_default``: at start a node with ``autoCreateTopicEnable`` holds ``TBW102``, the
  template auto-created topics copy (read, write and inherit).
- ``create_in_send``: createTopicInSendMessageMethod: an existing config wins; else the
  default topic's config is the template when its perm has PERM_INHERIT: queue count
  min(client's, template's writeQueueNums) (at least 1 here), perm without PERM_INHERIT.
- ``create_in_send_back``: createTopicInSendMessageBackMethod: an existing config wins, else
  one with the given queues and perm (retry and dead-letter topics).
- ``put``: updateTopicConfig (an administrator's create or replace).
- ``delete``: deleteTopicConfig (an administrator's ``mqadmin deleteTopic``).
- ``adopt_orphan_queues``: a slave promoted before SlaveSynchronize copied a new topic's
  config holds its queues but no config: one is created from the queues it holds.
- ``replace_from_master``: SlaveSynchronize.syncTopicConfig takes the master's table and
  dataVersion when they differ.

Every change bumps the dataVersion (name servers compare it) and is persisted before the call
returns; the name server registration is the caller's (it is above the store).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from broker.store.config_store import JsonConfigFile, TableConfig, topic_config

log = logging.getLogger(__name__)

TABLE_KEY = "topicConfigTable"
DEFAULT_TOPIC = "TBW102"  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
PERM_INHERIT = 0x1  # RocketMQ PermName.PERM_INHERIT
PERM_RW_INHERIT = 0x7  # read | write | inherit: TBW102's permission


class TopicConfigManager:
    """Build with ``TopicConfigManager.load(path)``. Configs are RocketMQ's TopicConfig as it
    serialises them (``topicName``, ``readQueueNums``, ``writeQueueNums``, ``perm``, ...)."""

    def __init__(self, tables: TableConfig) -> None:
        self._tables = tables

    @classmethod
    def load(cls, path: str) -> TopicConfigManager:
        return cls(TableConfig.load(path, TABLE_KEY))

    # -- reading --------------------------------------------------------------------------------

    def get(self, topic: str) -> dict[str, Any] | None:
        return self._tables.table.get(topic)

    def __contains__(self, topic: object) -> bool:
        return topic in self._tables.table

    @property
    def table(self) -> dict[str, dict[str, Any]]:
        """Topic -> config: a copy of the table (the configs in it are the stored ones: read
        them; change them through the methods below)."""
        return dict(self._tables.table)

    @property
    def data_version(self) -> dict[str, int]:
        return self._tables.data_version

    @property
    def file(self) -> JsonConfigFile:
        return self._tables.file

    def to_json(self) -> dict[str, Any]:
        return self._tables.to_json()

    # -- changing -------------------------------------------------------------------------------

    def put(self, topic: str, config: dict[str, Any]) -> None:
        """Create or replace ``topic``'s config (updateTopicConfig), persisted."""
        self._tables.put(topic, config)
        self.persist()

    def delete(self, topic: str) -> bool:
        """Remove ``topic``'s config (deleteTopicConfig), persisted; False when it had none."""
        if self._tables.table.pop(topic, None) is None:
            return False
        self._tables.next_version()
        self.persist()
        return True

    def ensure_default(self, queue_nums: int) -> bool:
        """``TBW102`` with ``queue_nums`` queues when absent; True when created now."""
        if DEFAULT_TOPIC in self._tables.table:
            return False
        self.put(DEFAULT_TOPIC, topic_config(DEFAULT_TOPIC, queue_nums, PERM_RW_INHERIT))
        return True

    def create_in_send(
        self, topic: str, default_topic: str | None, queue_nums: int
    ) -> tuple[dict[str, Any] | None, bool]:
        """(config, created now) for a send to ``topic``: the existing config, else one made
        from ``default_topic``'s (TBW102 when None) when that one may be inherited; (None,
        False) when it may not. The caller checks the name and whether auto-create is on."""
        tc = self.get(topic)
        if tc is not None:
            return tc, False
        template = self.get(default_topic or DEFAULT_TOPIC)
        if template is None or not int(template.get("perm", 0)) & PERM_INHERIT:
            return None, False
        nums = max(1, min(queue_nums, int(template.get("writeQueueNums", queue_nums))))
        tc = topic_config(topic, nums, int(template["perm"]) & ~PERM_INHERIT)
        self.put(topic, tc)
        log.info("auto-created topic %s with %d queues", topic, nums)
        return tc, True

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int) -> bool:
        """A retry or dead-letter topic: an existing config wins; True when created now."""
        if self.get(topic) is not None:
            return False
        self.put(topic, topic_config(topic, queue_nums, perm))
        log.info("created topic %s (%d queues, perm %d)", topic, queue_nums, perm)
        return True

    def adopt_orphan_queues(self, queues: Iterable[tuple[str, int]], node: str) -> list[str]:
        """A config for every topic among ``queues`` ((topic, queue id) the store holds) that
        has none, with as many queues as it holds; persisted. Returns the topics adopted."""
        counts: dict[str, int] = {}
        for topic, qid in queues:
            counts[topic] = max(counts.get(topic, 0), qid + 1)
        adopted = []
        for topic, n in sorted(counts.items()):
            if topic not in self._tables.table:
                self._tables.put(topic, topic_config(topic, n))
                adopted.append(topic)
                log.warning(
                    "%s: topic %s had queues but no config: created with %d queues", node, topic, n
                )
        self.persist()
        return adopted

    def replace_from_master(self, doc: Any) -> bool:
        """The master's GET_ALL_TOPIC_CONFIG document: its table and dataVersion replace ours
        when the table differs (persisted); True then. ValueError names a malformed document."""
        if not self._tables.replace(doc, "GET_ALL_TOPIC_CONFIG"):
            return False
        self.persist()
        return True

    def persist(self) -> None:
        self._tables.persist()
