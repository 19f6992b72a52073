"""RocketMQ's config JSON: fastjson input, atomic output, corrupt files."""

from __future__ import annotations

import json
import os

import pytest

from broker.store.config_store import (
    ConsumerOffsetTable,
    DelayOffsetTable,
    TableConfig,
)
from contracts.errors import CorruptFileError
from contracts.fastjson import loads_fastjson


def test_golden_fastjson_files_parse(golden_stores) -> None:
    d = golden_stores / "Shaoxubao_rocketmq-study"
    offsets = ConsumerOffsetTable.load(str(d / "store_config_consumerOffset.json"))
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


def test_offsets_only_move_forward_unless_reset(tmp_path) -> None:
    t = ConsumerOffsetTable(str(tmp_path / "consumerOffset.json"))
    assert t.commit("g", "t", 0, 10)
    assert not t.commit("g", "t", 0, 5)
    assert t.query("g", "t", 0) == 10
    assert t.reset("g", "t", 0, 3) == 10
    assert t.query("g", "t", 0) == 3


def test_persist_is_atomic_keeps_backup_and_reads_back(tmp_path) -> None:
    path = str(tmp_path / "config" / "consumerOffset.json")
    t = ConsumerOffsetTable(path)
    t.commit("g", "t", 1, 7)
    t.persist()
    t.commit("g", "t", 1, 9)
    t.persist()
    assert json.load(open(path))["offsetTable"] == {"t@g": {"1": 9}}
    assert json.load(open(path + ".bak"))["offsetTable"] == {"t@g": {"1": 7}}
    assert not os.path.exists(path + ".tmp")
    assert ConsumerOffsetTable.load(path).query("g", "t", 1) == 9


def test_corrupt_file_falls_back_to_backup(tmp_path, caplog) -> None:
    path = str(tmp_path / "consumerOffset.json")
    t = ConsumerOffsetTable(path)
    t.commit("g", "t", 0, 4)
    t.persist()
    t.persist()  # now a .bak exists too
    with open(path, "w") as fh:
        fh.write('{"offsetTable": {"t@g": {0: 4')  # torn write
    loaded = ConsumerOffsetTable.load(path)
    assert loaded.query("g", "t", 0) == 4
    assert "falling back" in caplog.text


def test_corrupt_file_without_backup_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "topics.json"
    path.write_text('{\n\t"topicConfigTable": {\n\t\t"a": nope\n}')
    with pytest.raises(CorruptFileError) as exc:
        TableConfig.load(str(path), "topicConfigTable")
    assert str(path) in str(exc.value) and "line 3" in str(exc.value)


def test_wrong_shape_is_reported(tmp_path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text('{"offsetTable": {"no-at-sign": {"0": 1}}}')
    with pytest.raises(CorruptFileError, match="topic@group"):
        ConsumerOffsetTable.load(str(path))
