"""broker/runtime_config.py and the admin helpers, without processes: which keys change at
runtime, how the config file is rewritten, how the new config reaches the node's holders."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.admin.common import UsageError, iso_ms, parse_time_ms
from broker.config import _PROPERTIES, BrokerConfig, BrokerRole
from broker.live_config import LiveConfig
from broker.processors.broker_config import fastjson_mq_map
from broker.runtime_config import (
    NotRuntimeKeyError,
    check_updates,
    config_properties,
    parse_properties,
    rewrite_config_text,
    update_node_config,
)
from contracts.errors import ConfigError


def test_check_updates_types_values_and_refuses_others():
    assert check_updates({"maxMessageSize": "1024", "slaveReadEnable": "TRUE"}) == {
        "maxMessageSize": 1024,
        "slaveReadEnable": True,
    }
    with pytest.raises(
        NotRuntimeKeyError, match="'brokerRole' cannot be changed by an update: the node's identity"
    ):
        check_updates({"brokerRole": "SLAVE"})
    with pytest.raises(NotRuntimeKeyError, match="^unknown key 'noSuchKey' \\(changeable"):
        check_updates({"noSuchKey": "1"})
    # a typo is named as one, with the key meant (updateBrokerConfig says it before sending)
    with pytest.raises(
        NotRuntimeKeyError, match="^unknown key 'maxMesageSize'; did you mean maxMessageSize\\?"
    ):
        check_updates({"maxMesageSize": "1"})
    with pytest.raises(
        NotRuntimeKeyError, match="^unknown key 'slavereadenable'; did you mean slaveReadEnable\\?"
    ):
        check_updates({"slavereadenable": "true"})
    for key, raw in (
        ("maxMessageSize", "0"),
        ("maxMessageSize", "1k"),
        ("accessMessageInMemoryMaxRatio", "101"),
        ("autoCreateTopicEnable", "1"),
    ):
        with pytest.raises(ConfigError, match=key):
            check_updates({key: raw})
    with pytest.raises(ConfigError, match="no key=value"):
        check_updates({})


def test_the_archivers_round_keys_change_at_runtime_the_read_once_keys_are_saved():
    typed = check_updates({"archiveChunkMinBytes": "65536", "archiveChunkMaxAgeMs": "0"})
    assert typed == {"archiveChunkMinBytes": 65536, "archiveChunkMaxAgeMs": 0}
    for static in ("archiveChunkMaxBytes", "metricsPromExporterPort", "flushIntervalCommitLog"):
        assert check_updates({static: " 1"}) == {static: "1"}  # for the next start
    with pytest.raises(NotRuntimeKeyError, match="did you mean archiveChunkMinBytes"):
        check_updates({"archiveChunkMinByte": "1"})


def test_black_list_and_unused_rocketmq_keys_are_refused_with_their_reason():
    for key, why in (
        ("brokerConfigPath", "the config file's own path"),
        ("configBlackList", "black list itself"),
        ("aclFile", "security"),
        ("tlsServerKeyPath", "security"),
        ("listenPort", "listen address"),
        ("storePathCommitLog", "store's location"),
        ("brokerClusterName", "identity"),
        ("enableControllerMode", "identity"),
        ("rocketmqHome", "installation"),
    ):
        with pytest.raises(
            NotRuntimeKeyError, match=f"^'{key}' cannot be changed by an update: .*{why}"
        ):
            check_updates({key: "1"})
    with pytest.raises(NotRuntimeKeyError, match="^'brokerIP2' is a RocketMQ key haproof does not"):
        check_updates({"brokerIP2": "1.2.3.4"})
    with pytest.raises(ConfigError, match="not one line"):
        check_updates({"flushIntervalCommitLog": "1\nbrokerName=x"})


def test_a_read_once_key_is_saved_not_applied_and_checked_as_the_file_is(tmp_path):
    node, conf = _node(tmp_path)
    config = node.config.current
    changes = _update(node, {"flushIntervalCommitLog": "250", "maxMessageSize": "4096"})
    assert changes == {
        "flushIntervalCommitLog": ("500", "250", False),
        "maxMessageSize": ("4194304", "4096", True),
    }
    assert node.config.flush_interval_commit_log_ms == config.flush_interval_commit_log_ms
    assert node.config.max_message_size_bytes == 4096
    assert BrokerConfig.from_file(str(conf)).flush_interval_commit_log_ms == 250
    before = conf.read_text()
    for bad in ("0", "soon"):  # --check-config's checks: the file is left as it was
        with pytest.raises(
            ConfigError, match=f"refused, {conf} unchanged: .*flushIntervalCommitLog"
        ):
            _update(node, {"flushIntervalCommitLog": bad})
    assert conf.read_text() == before


def test_rewrite_keeps_the_file_and_replaces_the_last_occurrence():
    text = "# note\nbrokerName=b\nmaxMessageSize=10\n\n! other\nmaxMessageSize : 20\nx=1\n"
    out = rewrite_config_text(text, {"maxMessageSize": 99, "slaveReadEnable": True})
    assert out == (
        "# note\nbrokerName=b\nmaxMessageSize=10\n\n! other\nmaxMessageSize=99\nx=1\n"
        "slaveReadEnable=true\n"
    )
    assert parse_properties(out, "f")["maxMessageSize"] == "99"  # the last one wins when read
    with pytest.raises(ConfigError, match="f:2: expected key=value"):
        parse_properties("a=1\njunk\n", "f")


def _node(tmp_path, path=True):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\nstorePathRootDir={tmp_path}\n")
    live = LiveConfig(BrokerConfig.from_file(str(conf)))
    # the node hands the one holder to its parts: a store and a service here
    store, svc = SimpleNamespace(config=live), SimpleNamespace(config=live)
    node = SimpleNamespace(
        config=live, config_path=str(conf) if path else None, store=store, services=[svc]
    )
    return node, conf


def _update(node, updates):
    return update_node_config(node.config, node.config_path, updates)


def test_update_persists_then_applies_to_every_holder(tmp_path):
    node, conf = _node(tmp_path)
    changes = _update(node, {"maxMessageSize": "2048"})
    assert changes == {"maxMessageSize": ("4194304", "2048", True)}
    assert node.config.max_message_size_bytes == 2048
    assert node.store.config.max_message_size_bytes == 2048
    assert node.services[0].config.current is node.config.current  # one assignment, seen by all
    assert BrokerConfig.from_file(str(conf)).max_message_size_bytes == 2048
    assert config_properties(node.config.current)["maxMessageSize"] == "2048"


def test_update_keeps_what_else_the_live_config_says(tmp_path):
    """The change replaces only its keys: the rest of the live config (here a role and id
    that differ from the file's) stays as it was."""
    node, conf = _node(tmp_path)
    node.config.current = node.config.current.replace(broker_id=1, broker_role=BrokerRole.SLAVE)
    _update(node, {"maxMessageSize": "4096"})
    assert node.config.max_message_size_bytes == node.store.config.max_message_size_bytes == 4096
    assert node.config.broker_role is BrokerRole.SLAVE


def test_secrets_never_leave_in_the_shown_config(tmp_path):
    conf = tmp_path / "broker.conf"
    # unknown keys (kept in extra, shown too) only pass with strictConfig=false
    conf.write_text(
        f"storePathRootDir={tmp_path}\nsecretKey=s3cr3t\nadminPassword=pw\n"
        "accessKey=ak\nemptyToken=\nstrictConfig=false\n"
    )
    config = BrokerConfig.from_file(str(conf))
    shown = config_properties(config, redact=True)
    assert shown["secretKey"] == shown["adminPassword"] == "******"
    assert shown["accessKey"] == "ak" and shown["emptyToken"] == ""
    assert "s3cr3t" not in "".join(shown.values())
    assert config_properties(config)["secretKey"] == "s3cr3t"  # only the shown copy is masked


def test_refusals_leave_file_and_node_alone(tmp_path):
    node, conf = _node(tmp_path)
    before, config = conf.read_text(), node.config.current
    for updates in ({"listenPort": "1"}, {"maxMessageSize": "-1"}):
        with pytest.raises(ConfigError):
            _update(node, updates)
    assert conf.read_text() == before and node.config.current is config
    node, conf = _node(tmp_path, path=False)
    with pytest.raises(ConfigError, match="without a config file"):
        _update(node, {"maxMessageSize": "2048"})


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


# -- properties over many inputs ------------------------------------------------------------------

_KEYS = st.sampled_from(
    [
        "brokerName",
        "listenPort",
        "maxMessageSize",
        "slaveReadEnable",
        "haSlaveFallbehindMax",
        "custom.key",
        "x",
    ]
)
_VALUES = st.text(
    st.characters(codec="utf-8", exclude_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
    max_size=20,
)
_LINES = st.one_of(
    st.tuples(_KEYS, st.sampled_from(["=", " = ", ":"]), _VALUES).map(lambda t: "".join(t)),
    st.sampled_from(["", "# a comment", "! another", "   "]),
)
_UPDATES = st.dictionaries(
    st.sampled_from(["maxMessageSize", "slaveReadEnable", "haSlaveFallbehindMax"]),
    st.one_of(st.integers(1, 2**40), st.booleans()),
    min_size=1,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINES, max_size=12), _UPDATES)
def test_rewrite_changes_only_the_updated_keys(lines, updates):
    text = "".join(f"{line}\n" for line in lines)
    out = rewrite_config_text(text, updates)
    want = parse_properties(text, "f")
    want.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in updates.items()})
    assert parse_properties(out, "f") == want
    comments = [line for line in lines if line.strip()[:1] in ("#", "!")]
    assert [line for line in out.splitlines() if line.strip()[:1] in ("#", "!")] == comments
    new_keys = set(updates) - set(parse_properties(text, "f"))
    assert len(out.splitlines()) == len(lines) + len(new_keys)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2**42))
def test_times_read_back(ms):
    assert parse_time_ms(str(ms)) == ms
    assert parse_time_ms(iso_ms(ms)) == ms


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=30).filter(lambda k: k not in _PROPERTIES), _VALUES)
def test_only_config_keys_pass(key, value):
    with pytest.raises(NotRuntimeKeyError):
        check_updates({key: value})


def test_request_codes_are_rocketmqs():
    """The numbers of RocketMQ's RequestCode (checked against its source), so mqadmin's
    requests reach these handlers."""
    from broker.remoting.codes import RequestCode as R

    assert (R.UPDATE_BROKER_CONFIG, R.GET_BROKER_CONFIG, R.GET_BROKER_RUNTIME_INFO) == (25, 26, 28)
    assert (R.GET_ROUTEINFO_BY_TOPIC, R.GET_BROKER_CLUSTER_INFO) == (105, 106)
    assert (R.GET_TOPIC_STATS_INFO, R.GET_CONSUME_STATS, R.INVOKE_BROKER_TO_RESET_OFFSET) == (
        202,
        208,
        222,
    )
