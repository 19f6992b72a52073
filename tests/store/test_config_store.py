"""RocketMQ's config JSON: fastjson input, atomic output, corrupt files."""

from __future__ import annotations

import pytest

from broker.store.config_store import TableConfig
from broker.store.consumer_offsets import ConsumerOffsetManager
from broker.store.delay_offsets import DelayOffsetTable
from contracts.errors import CorruptFileError
from contracts.fastjson import loads_fastjson


def test_golden_fastjson_files_parse(golden_stores) -> None:
    d = golden_stores / "Shaoxubao_rocketmq-study"
    offsets = ConsumerOffsetManager.load(str(d / "store_config_consumerOffset.json"))
    assert offsets.query("please_rename_unique_group_name_4", "TopicTest", 3) == 250
    assert offsets.table["TopicTest@please_rename_unique_group_name_4"] == {
        0: 250,
        1: 250,
        2: 250,
        3: 250,
    }
    topics = TableConfig.load(str(d / "store_config_topics.json"), "topicConfigTable")
    assert topics.table["TopicTest"]["writeQueueNums"] == 4
    assert topics.data_version["counter"] == 3
    groups = TableConfig.load(
        str(d / "store_config_subscriptionGroup.json"), "subscriptionGroupTable"
    )
    assert "SELF_TEST_C_GROUP" in groups.table
    assert DelayOffsetTable.load(str(d / "store_config_delayOffset.json")).table == {}


def test_unquoted_keys_inside_strings_are_left_alone() -> None:
    doc = loads_fastjson('{"a":"{1:2}", 3 : {4:5}, "b\\"{6:": 7}')
    assert doc == {"a": "{1:2}", "3": {"4": 5}, 'b"{6:': 7}


def test_corrupt_file_without_backup_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "topics.json"
    path.write_text('{\n\t"topicConfigTable": {\n\t\t"a": nope\n}')
    with pytest.raises(CorruptFileError) as exc:
        TableConfig.load(str(path), "topicConfigTable")
    assert str(path) in str(exc.value) and "line 3" in str(exc.value)
