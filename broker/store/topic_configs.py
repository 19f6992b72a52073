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

Every change bumps the dataVersion (name servers compare it) and is durable before the call
returns: one fsynced record appended to the topic change log beside ``topics.json``
(``broker/store/topic_log.py``), not a rewrite of every topic. A compaction (``persist``: at
shutdown, a replacement from the master, when the log holds half as many records as the table
has topics, at least ``COMPACT_MIN_RECORDS``: amortised O(1) per change) writes the whole table to ``topics.json`` and its
``.bak`` (both the same checkpoint, RocketMQ's format, readable by its tools) and then starts a
new log on it. ``changed_since`` names the topics changed since a dataVersion, for a name server
registration of only those (the registration is the caller's: it is above the store).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from typing import Any

from broker.store.config_store import TableConfig, TableManager, topic_config
from broker.store.topic_log import TopicChangeLog, read_log, replay

log = logging.getLogger(__name__)

TABLE_KEY = "topicConfigTable"
DEFAULT_TOPIC = "TBW102"  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
PERM_INHERIT = 0x1  # RocketMQ PermName.PERM_INHERIT
PERM_RW_INHERIT = 0x7  # read | write | inherit: TBW102's permission
LOG_SUFFIX = ".log"  # topics.json.log: the topic change log
COMPACT_MIN_RECORDS = 1000
CHANGES_KEPT = 4096  # changed_since answers for this many changes back


class TopicConfigManager(TableManager):
    """Build with ``TopicConfigManager.load(path)``. Configs are RocketMQ's TopicConfig as it
    serialises them (``topicName``, ``readQueueNums``, ``writeQueueNums``, ``perm``, ...).
    ``put`` is updateTopicConfig, ``delete`` deleteTopicConfig (TableManager's, each change
    one record in the change log)."""

    TABLE_KEY = TABLE_KEY
    MASTER_REQUEST = "GET_ALL_TOPIC_CONFIG"

    def __init__(self, tables: TableConfig, changes: TopicChangeLog) -> None:
        super().__init__(tables)
        self._log = changes
        # (dataVersion after a change, the topic it put; None: not a put, a delta cannot say it)
        self._changes: deque[tuple[dict[str, Any], str | None]] = deque(maxlen=CHANGES_KEPT)

    @classmethod
    def load(cls, path: str) -> TopicConfigManager:
        """The checkpoint (``topics.json``, else its ``.bak``) and the change log's records it
        does not hold yet. A torn tail or a checkpoint that is not the log's base is compacted
        at once (a new checkpoint, a new log)."""
        tables = TableConfig.load(path, TABLE_KEY)
        contents = read_log(path + LOG_SUFFIX)
        manager = cls(tables, TopicChangeLog(path + LOG_SUFFIX, exists=contents is not None))
        if contents is None:
            return manager
        checkpoint = tables.data_version
        known = [contents.base, *(r.get("dataVersion") for r in contents.records)]
        version, applied = replay(tables.table, checkpoint, contents, path + LOG_SUFFIX)
        if applied:
            log.info("%s: %d topic changes replayed from its log", path, applied)
        tables.data_version = version
        manager._log.records = len(contents.records)
        if contents.torn_at is not None or checkpoint not in known:
            manager.persist()  # a log that can be appended to again, on this checkpoint
        return manager

    def changed_since(self, version: dict[str, Any] | None) -> list[str] | None:
        """The topics created or replaced since the table had dataVersion ``version``, in the
        order of their changes; None when that cannot be said (a deletion or a replaced table
        since, a version too old or unknown): the caller then takes the whole table."""
        if version == self._tables.data_version:
            return []
        versions = [v for v, _ in self._changes]
        if version not in versions:
            return None
        after = list(self._changes)[versions.index(version) + 1 :]
        if any(topic is None for _, topic in after):
            return None
        return list(dict.fromkeys(topic for _, topic in after if topic is not None))

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
                self.put(topic, topic_config(topic, n))
                adopted.append(topic)
                log.warning(
                    "%s: topic %s had queues but no config: created with %d queues", node, topic, n
                )
        return adopted

    def persist(self) -> None:
        """Compact: the whole table to ``topics.json`` and its ``.bak`` (the checkpoint), then
        a new change log on it. A crash between the two leaves the old log, whose last record
        is the checkpoint's dataVersion: nothing of it is replayed again."""
        self._tables.file.checkpoint(self._tables.to_json())
        self._log.reset(self._tables.data_version)

    def _put_done(self, name: str, config: dict[str, Any]) -> None:
        self._logged({"op": "put", "topic": name, "config": config}, name)

    def _deleted(self, name: str) -> None:
        self._logged({"op": "delete", "topic": name}, None)

    def _replaced(self) -> None:
        self._changes.append((self._tables.data_version, None))
        self.persist()

    def _logged(self, change: dict[str, Any], topic: str | None) -> None:
        version = self._tables.data_version
        self._changes.append((version, topic))
        if not self._log.exists():
            self.persist()  # the first change of a table without a log: the log starts here
        else:
            self._log.append({**change, "dataVersion": version})
            if self._log.records >= max(COMPACT_MIN_RECORDS, len(self._tables.table) // 2):
                self.persist()
