"""broker/runtime_config.py and the admin helpers, without processes: which keys change at
runtime, how the config file is rewritten, how the new config reaches the node's holders."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.admin.common import UsageError, iso_ms, parse_time_ms
from broker.config import BrokerConfig
from broker.errors import ConfigError
from broker.processors.broker_config import fastjson_mq_map
from broker.runtime_config import (
    NotRuntimeKeyError,
    check_updates,
    config_properties,
    parse_properties,
    rewrite_config_text,
    update_node_config,
)


def test_check_updates_types_values_and_refuses_others():
    assert check_updates({"maxMessageSize": "1024", "slaveReadEnable": "TRUE"}) == {
        "maxMessageSize": 1024, "slaveReadEnable": True}  # fmt: skip
    with pytest.raises(NotRuntimeKeyError, match="'brokerRole' cannot be changed at runtime"):
        check_updates({"brokerRole": "SLAVE"})
    with pytest.raises(NotRuntimeKeyError, match="'noSuchKey'"):
        check_updates({"noSuchKey": "1"})
    for key, raw in (("maxMessageSize", "0"), ("maxMessageSize", "1k"),
                     ("accessMessageInMemoryMaxRatio", "101"), ("autoCreateTopicEnable", "1")):  # fmt: skip
        with pytest.raises(ConfigError, match=key):
            check_updates({key: raw})
    with pytest.raises(ConfigError, match="no key=value"):
        check_updates({})


def test_rewrite_keeps_the_file_and_replaces_the_last_occurrence():
    text = "# note\nbrokerName=b\nmaxMessageSize=10\n\n! other\nmaxMessageSize : 20\nx=1\n"
    out = rewrite_config_text(text, {"maxMessageSize": 99, "slaveReadEnable": True})
    assert out == ("# note\nbrokerName=b\nmaxMessageSize=10\n\n! other\nmaxMessageSize=99\nx=1\n"
                   "slaveReadEnable=true\n")  # fmt: skip
    assert parse_properties(out, "f")["maxMessageSize"] == "99"  # the last one wins when read
    with pytest.raises(ConfigError, match="f:2: expected key=value"):
        parse_properties("a=1\njunk\n", "f")


def _node(tmp_path, path=True):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\nstorePathRootDir={tmp_path}\n")
    config = BrokerConfig.from_file(str(conf))
    store, svc, other = (SimpleNamespace(config=config), SimpleNamespace(config=config),
                         SimpleNamespace(config=None))  # fmt: skip
    node = SimpleNamespace(config=config, config_path=str(conf) if path else None, store=store,
                           services=[svc, other], role_services=[])  # fmt: skip
    return node, conf


def test_update_persists_then_applies_to_every_holder(tmp_path):
    node, conf = _node(tmp_path)
    changes = update_node_config(node, {"maxMessageSize": "2048"})
    assert changes == {"maxMessageSize": ("4194304", "2048")}
    assert node.config.max_message_size_bytes == 2048
    assert node.store.config is node.config and node.services[0].config is node.config
    assert node.services[1].config is None
    assert BrokerConfig.from_file(str(conf)).max_message_size_bytes == 2048
    assert config_properties(node.config)["maxMessageSize"] == "2048"


def test_refusals_leave_file_and_node_alone(tmp_path):
    node, conf = _node(tmp_path)
    before, config = conf.read_text(), node.config
    for updates in ({"listenPort": "1"}, {"maxMessageSize": "-1"}):
        with pytest.raises(ConfigError):
            update_node_config(node, updates)
    assert conf.read_text() == before and node.config is config
    node, conf = _node(tmp_path, path=False)
    with pytest.raises(ConfigError, match="without a config file"):
        update_node_config(node, {"maxMessageSize": "2048"})


def test_parse_time_ms_forms():
    assert parse_time_ms("1700000000123") == 1_700_000_000_123
    assert parse_time_ms("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_time_ms("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    assert parse_time_ms("2023-11-14T22:13:20") == 1_700_000_000_000  # no zone: UTC
    assert parse_time_ms("2023-11-14#22:13:20:123") == 1_700_000_000_123  # mqadmin's form
    assert iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z" and iso_ms(0) == "-"
    for bad in ("yesterday", "-5", "2023-13-01T00:00:00Z", "1969-12-31T00:00:00Z"):
        with pytest.raises(UsageError, match="timestamp"):
            parse_time_ms(bad)


def test_fastjson_message_queue_map():
    rows = [{"topic": "T", "brokerName": "b", "queueId": 1, "offset": 7}]
    assert fastjson_mq_map(rows, None) == '{{"brokerName":"b","queueId":1,"topic":"T"}:7}'
    rows[0].update(minOffset=0, maxOffset=7)
    assert fastjson_mq_map(rows, ("maxOffset", "minOffset")) == (
        '{{"brokerName":"b","queueId":1,"topic":"T"}:{"maxOffset":7,"minOffset":0}}'
    )
