"""Config files fail safe (issue 28): a copy over a JSON limit (100k nesting, a 23-digit integer)
gives way to the other verified copy with a WARNING, in every config file; both unusable refuse
the start with one line; both offset files gone from a store holding messages refuse the start
unless --accept-lost-offsets (a real ``haproof broker`` process for the exit codes)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.store.message_store import MessageStore
from broker.store.results import PutMessageStatus
from contracts.errors import CorruptFileError, StoreError
from contracts.record.model import Message
from tools.localcluster import free_port, write_broker_conf

ROOT = Path(__file__).resolve().parents[2]
FILES = ("consumerOffset.json", "topics.json", "subscriptionGroup.json", "delayOffset.json")
DAMAGE = {
    "deep": "[" * 100_000 + "]" * 100_000,
    "long integer": '{"offsetTable": {"T@G": {"0": ' + "9" * 23 + "}}}",
}


def _config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig.from_dict(
        {"storePathRootDir": str(tmp_path / "store"), "mappedFileSizeCommitLog": 1 << 20}
    )


def _populated(tmp_path: Path) -> Path:
    """A store holding one message and every config file (and its .bak) written twice."""
    store = MessageStore.open(_config(tmp_path))
    try:
        res = store.put_message(Message("T", b"x", 0)).result()
        assert res.status is PutMessageStatus.PUT_OK
        store.consumer_offsets.commit("G", "T", 0, 1)
        store.topic_config.put("T", {"topicName": "T", "writeQueueNums": 1, "readQueueNums": 1})
        store.subscription_groups.find("G", auto_create=True)
        store.delay_offsets.advance(1, 0)
        for _ in range(2):  # the second write leaves the first as .bak
            store.consumer_offsets.persist()
            store.topic_config.persist()
            store.subscription_groups.persist()
            store.delay_offsets.persist()
    finally:
        store.shutdown()
    return tmp_path / "store" / "config"


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_copy_over_a_json_limit_gives_way_to_the_other(tmp_path, caplog, name, damage):
    cfg = _populated(tmp_path)
    for victim in (cfg / name, cfg / f"{name}.bak"):
        good = victim.read_bytes()
        victim.write_text(DAMAGE[damage])
        with caplog.at_level(logging.WARNING):
            store = MessageStore.open(_config(tmp_path))
        try:
            assert store.consumer_offsets.query("G", "T", 0) == 1
            assert "T" in store.topic_config.table and "G" in store.subscription_groups.table
            assert store.delay_offsets.table == {1: 0}
        finally:
            store.shutdown()
        if victim.name == name:  # a damaged main copy is said; a good one is read alone
            warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert any(victim.name in m and "using" in m for m in warned), warned
        victim.write_bytes(good)
        caplog.clear()


@pytest.mark.parametrize("name", FILES)
def test_both_copies_unusable_refuse_the_start_naming_them(tmp_path, name):
    cfg = _populated(tmp_path)
    (cfg / name).write_text(DAMAGE["deep"])
    (cfg / f"{name}.bak").write_text(DAMAGE["long integer"])
    with pytest.raises((CorruptFileError, StoreError)) as err:
        MessageStore.open(_config(tmp_path))
    assert name in str(err.value) and "\n" not in str(err.value)


def _broker(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    conf = write_broker_conf(
        tmp_path / "b.conf",
        {
            "brokerName": "broker-a",
            "storePathRootDir": tmp_path / "store",
            "mappedFileSizeCommitLog": 1 << 20,
            "listenPort": free_port(),
        },
    )
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "broker", "-c", str(conf), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_both_offset_files_missing_from_a_store_with_messages_refuse_the_start(tmp_path):
    cfg = _populated(tmp_path)
    os.unlink(cfg / "consumerOffset.json")
    os.unlink(cfg / "consumerOffset.json.bak")
    r = _broker(tmp_path)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "both missing" in lines[0], r.stderr
    assert "--accept-offset-loss" in lines[0]
    store = MessageStore.open(_config(tmp_path), accept_offset_loss=True)
    try:
        assert "both missing" in store.consumer_offsets.accepted_loss
    finally:
        store.shutdown()


def test_a_new_store_writes_its_offset_file_at_once(tmp_path):
    store = MessageStore.open(_config(tmp_path))
    try:
        assert (tmp_path / "store" / "config" / "consumerOffset.json").is_file()
    finally:
        store.shutdown()
