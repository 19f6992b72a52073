"""TopicConfigManager / SubscriptionGroupManager: RocketMQ's rules, each change persisted."""

from __future__ import annotations

import pytest

from broker.store.subscription_groups import SubscriptionGroupManager
from broker.store.topic_configs import DEFAULT_TOPIC, TopicConfigManager


def _topics(tmp_path) -> TopicConfigManager:
    return TopicConfigManager.load(str(tmp_path / "topics.json"))


def test_create_in_send_inherits_from_the_default_topic(tmp_path):
    topics = _topics(tmp_path)
    assert topics.create_in_send("T", None, 4) == (None, False)  # no TBW102 yet
    assert topics.ensure_default(8) and not topics.ensure_default(8)
    tc, created = topics.create_in_send("T", None, 4)
    assert created and (tc["writeQueueNums"], tc["readQueueNums"], tc["perm"]) == (4, 4, 6)
    assert topics.create_in_send("T", None, 16) == (tc, False)  # an existing config wins
    tc2, _ = topics.create_in_send("U", DEFAULT_TOPIC, 64)
    assert tc2["writeQueueNums"] == 8  # at most the template's queues
    assert _topics(tmp_path).table == topics.table  # persisted
    assert topics.data_version["counter"] == 3


def test_a_template_without_inherit_creates_nothing(tmp_path):
    topics = _topics(tmp_path)
    topics.put("NoInherit", {"topicName": "NoInherit", "writeQueueNums": 4, "perm": 6})
    assert topics.create_in_send("T", "NoInherit", 4) == (None, False)
    assert "T" not in topics


def test_send_back_topics_and_orphan_queues(tmp_path):
    topics = _topics(tmp_path)
    assert topics.create_in_send_back("%RETRY%G", 1, 6)
    assert not topics.create_in_send_back("%RETRY%G", 3, 2)
    assert topics.get("%RETRY%G")["writeQueueNums"] == 1
    adopted = topics.adopt_orphan_queues([("A", 0), ("A", 2), ("%RETRY%G", 5)], "n1")
    assert adopted == ["A"] and topics.get("A")["readQueueNums"] == 3
    assert _topics(tmp_path).get("A") == topics.get("A")


def test_replace_from_master_takes_table_and_version(tmp_path):
    topics = _topics(tmp_path)
    topics.put("Old", {"topicName": "Old"})
    doc = {"topicConfigTable": {"New": {"topicName": "New"}}, "dataVersion": {"counter": 9}}
    assert topics.replace_from_master(doc) and not topics.replace_from_master(doc)
    assert topics.table == {"New": {"topicName": "New"}}
    assert _topics(tmp_path).data_version == {"counter": 9}
    for bad in ([], {"topicConfigTable": {"X": 1}}, {"topicConfigTable": [], "dataVersion": 1}):
        with pytest.raises(ValueError, match="GET_ALL_TOPIC_CONFIG"):
            topics.replace_from_master(bad)
    assert topics.table == {"New": {"topicName": "New"}}


def test_the_table_is_a_copy(tmp_path):
    topics = _topics(tmp_path)
    topics.table["X"] = {}
    assert "X" not in topics


def test_groups_find_creates_only_when_allowed(tmp_path):
    path = str(tmp_path / "subscriptionGroup.json")
    groups = SubscriptionGroupManager.load(path)
    assert groups.find("G", auto_create=False) is None and "G" not in groups
    sub = groups.find("G", auto_create=True)
    assert sub["retryMaxTimes"] == 16 and groups.find("G", auto_create=False) is sub
    assert "G" in SubscriptionGroupManager.load(path)
    doc = {"subscriptionGroupTable": {"H": {"groupName": "H"}}, "dataVersion": {}}
    assert groups.replace_from_master(doc)
    assert SubscriptionGroupManager.load(path).table == {"H": {"groupName": "H"}}
