"""topics.json persisted incrementally: an fsynced change log beside it, compacted into it.

Crash at any step (inside an append, between a compaction's writes) loses no change whose call
returned and never leaves a store that does not load."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.store import config_store, topic_configs, topic_log
from broker.store.config_store import topic_config
from broker.store.topic_configs import LOG_SUFFIX, TopicConfigManager
from contracts.errors import CorruptFileError


def _load(path) -> TopicConfigManager:
    return TopicConfigManager.load(str(path))


def _checkpoint(path) -> dict:
    return json.loads(path.read_text())["topicConfigTable"]


def test_a_new_topic_appends_a_record_and_does_not_rewrite_topics_json(tmp_path):
    path = tmp_path / "topics.json"
    topics = _load(path)
    topics.put("First", topic_config("First", 4))  # the first change starts the log
    before = (path.stat().st_ino, path.read_bytes())
    for i in range(50):
        topics.put(f"T{i}", topic_config(f"T{i}", 4))
    assert (path.stat().st_ino, path.read_bytes()) == before  # the checkpoint untouched
    assert topics.delete("T3") and not topics.delete("T3")
    again = _load(path)  # as after a kill -9: the log replayed
    assert again.table == topics.table and "T3" not in again
    assert again.data_version == topics.data_version
    assert set(_checkpoint(path)) == {"First"}
    again.persist()  # compaction: the checkpoint is the whole table, RocketMQ's format
    doc = json.loads(path.read_text())
    assert set(doc) == {"topicConfigTable", "dataVersion"} and len(doc["topicConfigTable"]) == 50
    assert json.loads((tmp_path / "topics.json.bak").read_text()) == doc
    assert _load(path).table == topics.table


def test_the_log_is_compacted_when_it_holds_half_as_many_records_as_the_table(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(topic_configs, "COMPACT_MIN_RECORDS", 8)
    path = tmp_path / "topics.json"
    topics = _load(path)
    sizes = []
    for i in range(40):
        topics.put(f"T{i}", topic_config(f"T{i}", 1))
        sizes.append(os.path.getsize(str(path) + LOG_SUFFIX))
    assert max(sizes) < 40 * 150  # never the whole history
    assert len(_checkpoint(path)) >= 16  # compacted along the way
    assert _load(path).table == topics.table


def test_a_torn_last_record_is_dropped_and_the_log_rewritten(tmp_path, caplog):
    path = tmp_path / "topics.json"
    topics = _load(path)
    for i in range(5):
        topics.put(f"T{i}", topic_config(f"T{i}", 4))
    log_path = str(path) + LOG_SUFFIX
    whole = open(log_path, "rb").read()
    last = len(
        topic_log.encode_record(
            {
                "op": "put",
                "topic": "T4",
                "config": topics.get("T4"),
                "dataVersion": topics.data_version,
            }
        )
    )
    for cut in (1, 5, 8, last - 1):
        with open(log_path, "wb") as fh:
            fh.write(whole[:-cut])
        again = _load(path)
        assert set(again.table) == {f"T{i}" for i in range(4)}
        assert "cut short" in caplog.text
        again.put("T9", topic_config("T9", 1))  # appendable again: the log was rewritten
        assert "T9" in _load(path) and "T4" not in _load(path)
        with open(log_path, "wb") as fh:  # back to the five topics' log
            fh.write(whole)
        topics = _load(path)
        assert "T9" not in topics or topics.delete("T9")
    with open(log_path, "ab") as fh:
        fh.write(b"\0" * 100)  # a file system's zero-filled tail after a crash
    assert set(_load(path).table) >= {f"T{i}" for i in range(4)}


def test_damage_before_good_records_refuses_with_the_file_and_offset(tmp_path):
    path = tmp_path / "topics.json"
    topics = _load(path)
    for i in range(5):
        topics.put(f"T{i}", topic_config(f"T{i}", 4))
    log_path = str(path) + LOG_SUFFIX
    data = bytearray(open(log_path, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(log_path, "wb").write(bytes(data))
    with pytest.raises(CorruptFileError, match=r"topics\.json\.log.*at byte \d+"):
        _load(path)


def test_a_broken_checkpoint_falls_back_to_its_bak_and_the_log(tmp_path):
    path = tmp_path / "topics.json"
    topics = _load(path)
    for i in range(3):
        topics.put(f"T{i}", topic_config(f"T{i}", 4))
    topics.persist()
    topics.put("After", topic_config("After", 2))
    path.write_text("{" * 100_000)  # over the JSON depth limit
    assert _load(path).table == topics.table


class Crash(Exception):
    pass


@pytest.mark.parametrize("crash_at", [1, 2, 3])
def test_a_crash_inside_a_compaction_loses_nothing(tmp_path, monkeypatch, crash_at):
    """Compaction's writes: 1 the .bak, 2 topics.json, 3 the new log. A crash before any of
    them leaves a store that loads to the same table, deletions included."""
    path = tmp_path / "topics.json"
    topics = _load(path)
    for i in range(6):
        topics.put(f"T{i}", topic_config(f"T{i}", 4))
    topics.delete("T1")
    topics.put("T1", topic_config("T1", 8))
    topics.delete("T2")
    expected = topics.table
    writes = []
    real = config_store.atomic_write

    def failing(p, data, keep_backup=False):
        writes.append(p)
        if len(writes) == crash_at:
            raise Crash(p)
        real(p, data, keep_backup)

    monkeypatch.setattr(config_store, "atomic_write", failing)
    monkeypatch.setattr(topic_log, "atomic_write", failing)
    with pytest.raises(Crash):
        topics.persist()
    monkeypatch.undo()
    again = _load(path)
    assert again.table == expected and again.data_version == topics.data_version
    again.put("New", topic_config("New", 1))
    assert set(_load(path).table) == set(expected) | {"New"}


OPS = st.lists(
    st.tuples(st.sampled_from(["put", "delete", "compact"]), st.integers(0, 5)), max_size=25
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, cut=st.integers(0, 400))
def test_a_crash_anywhere_in_the_log_loads_a_prefix_of_the_changes(tmp_path_factory, ops, cut):
    """Cutting the log at any byte loads the state after some prefix of the changes, and
    never one before the last compaction or a change whose append had completed then."""
    path = tmp_path_factory.mktemp("t") / "topics.json"
    topics = _load(path)
    states = [topics.table]
    log_path = str(path) + LOG_SUFFIX
    for op, n in ops:
        if op == "put":
            topics.put(f"T{n}", topic_config(f"T{n}", n + 1))
        elif op == "delete":
            topics.delete(f"T{n}")
        else:
            topics.persist()
            states = [topics.table]  # the checkpoint: nothing before it can come back
        states.append(topics.table)
    if not os.path.exists(log_path):
        return
    data = open(log_path, "rb").read()
    keep = max(len(topic_log.encode_record({"base": topics.data_version})), len(data) - cut)
    open(log_path, "wb").write(data[:keep])
    loaded = _load(path).table
    assert loaded in states
    if keep == len(data):
        assert loaded == topics.table
