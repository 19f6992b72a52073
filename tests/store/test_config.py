from __future__ import annotations

import pytest

from broker.config import BrokerConfig, BrokerRole, FlushDiskType, parse_delay_levels
from contracts.errors import ConfigError


def test_broker_conf_with_rocketmq_names(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a real-looking broker.conf\n"
        "brokerClusterName = c1\n"
        "brokerName=broker-a\n"
        "brokerId=1\n"
        "brokerRole=SLAVE\n"
        "flushDiskType=SYNC_FLUSH\n"
        f"storePathRootDir={tmp_path}/store\n"
        "listenPort=20911\n"
        "haMasterAddress=127.0.0.1:10912\n"
        "mappedFileSizeCommitLog=65536\n"
        "slaveReadEnable=true\n"
        "deleteWhen=04\n"
    )
    cfg = BrokerConfig.from_file(str(conf))
    assert cfg.broker_cluster_name == "c1"
    assert cfg.broker_role is BrokerRole.SLAVE and cfg.broker_id == 1
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.ha_listen_port == 20912  # listenPort + 1 by default
    assert cfg.store_path_commit_log == f"{tmp_path}/store/commitlog"
    assert cfg.node_name == "broker-a-1"
    assert cfg.slave_read_enable is True
    assert cfg.mapped_file_size_commit_log == 65536
    assert cfg.extra == {"deleteWhen": "04"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("brokerRole=MASTER", "brokerRole='MASTER'"),
        ("listenPort=abc", "listenPort='abc'"),
        ("flushDiskType=SOMETIMES", "flushDiskType"),
        ("syncFlushTimeout=0", "syncFlushTimeout=0: must be positive"),
        ("messageDelayLevel=1s 5x", "bad level '5x'"),
        ("brokerIP1=broker-a-0", "brokerIP1='broker-a-0': must be an IP address"),
        ("eventLoop=trio", "eventLoop='trio': expected one of UVLOOP, ASYNCIO"),
    ],
)
def test_bad_values_name_key_and_line(tmp_path, line: str, message: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\n{line}\n")
    with pytest.raises(ConfigError) as exc:
        BrokerConfig.from_file(str(conf))
    assert message in str(exc.value)
    assert str(conf) in str(exc.value)


def test_line_number_is_reported(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\n\nlistenPort=x\n")
    with pytest.raises(ConfigError, match=r"broker.conf:3:"):
        BrokerConfig.from_file(str(conf))


def test_role_and_id_must_agree() -> None:
    with pytest.raises(ConfigError, match="SLAVE needs brokerId > 0"):
        BrokerConfig(broker_role=BrokerRole.SLAVE, broker_id=0)
    with pytest.raises(ConfigError, match="must have brokerId 0"):
        BrokerConfig(broker_role=BrokerRole.SYNC_MASTER, broker_id=2)


def test_missing_file_and_garbage_line(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        BrokerConfig.from_file(str(tmp_path / "nope.conf"))
    conf = tmp_path / "b.conf"
    conf.write_text("just words\n")
    with pytest.raises(ConfigError, match="b.conf:1: expected key=value"):
        BrokerConfig.from_file(str(conf))


def test_archive_needs_root() -> None:
    with pytest.raises(ConfigError, match="archiveRoot"):
        BrokerConfig(archive_enable=True)


def test_default_delay_levels() -> None:
    levels = parse_delay_levels(BrokerConfig().message_delay_level)
    assert len(levels) == 18
    assert levels[0] == 1000 and levels[4] == 60_000 and levels[-1] == 7_200_000


def test_event_loop_defaults_to_uvloop_and_takes_asyncio() -> None:
    from broker.aio import EventLoop

    assert BrokerConfig().event_loop is EventLoop.UVLOOP
    assert BrokerConfig.from_dict({"eventLoop": "asyncio"}).event_loop is EventLoop.ASYNCIO


@pytest.mark.parametrize(
    ("line", "lineno_key", "hint"),
    [
        ("brokerrole=SYNC_MASTER", "brokerrole", "did you mean brokerRole?"),
        ("flushDiskTyp=SYNC_FLUSH", "flushDiskTyp", "did you mean flushDiskType?"),
        ("completelyMadeUp=1", "completelyMadeUp", "strictConfig=false"),
    ],
)
def test_unknown_key_is_an_error_naming_file_line_key_and_closest(
    tmp_path, line: str, lineno_key: str, hint: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\n# comment\n{line}\n")
    with pytest.raises(ConfigError) as exc:
        BrokerConfig.from_file(str(conf))
    msg = str(exc.value)
    assert msg.startswith(f"{conf}:3: unknown key {lineno_key!r}")
    assert hint in msg


def test_strict_config_false_warns_and_keeps_going(tmp_path, caplog) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("strictConfig=false\nbrokerrole=SYNC_MASTER\n")
    cfg = BrokerConfig.from_file(str(conf))
    assert cfg.broker_role is BrokerRole.ASYNC_MASTER and not cfg.strict_config
    assert cfg.extra == {"brokerrole": "SYNC_MASTER"}
    assert "did you mean brokerRole?" in caplog.text


def test_rocketmq_settings_we_do_not_use_are_accepted(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("deleteWhen=04\nfileReservedTime=48\nsendMessageThreadPoolNums=16\n")
    cfg = BrokerConfig.from_file(str(conf))
    assert set(cfg.extra) == {"deleteWhen", "fileReservedTime", "sendMessageThreadPoolNums"}


@pytest.mark.parametrize(
    "line",
    ["namesrvAddr=not-an-addr", "namesrvAddr=127.0.0.1:9876;host:0", "haMasterAddress=h:x"],
)
def test_bad_addresses_name_file_line_and_key(tmp_path, line: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\n{line}\n")
    key = line.partition("=")[0]
    with pytest.raises(ConfigError, match=rf"broker.conf:2: {key}=.*is not host:port"):
        BrokerConfig.from_file(str(conf))


def test_a_key_set_twice_is_an_error(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerRole=SYNC_MASTER\nbrokerRole=ASYNC_MASTER\n")
    with pytest.raises(ConfigError, match=r"broker.conf:2: brokerRole is set again .*line 1"):
        BrokerConfig.from_file(str(conf))


def _haproof(*args: str):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_check_config_validates_without_starting(tmp_path) -> None:
    good = tmp_path / "good.conf"
    good.write_text(f"brokerRole=SYNC_MASTER\nstorePathRootDir={tmp_path}/store\n")
    r = _haproof("broker", "--check-config", "-c", str(good))
    assert r.returncode == 0, r.stderr
    assert "configuration OK" in r.stdout and "SYNC_MASTER" in r.stdout
    assert not (tmp_path / "store").exists()  # nothing started, nothing created
    bad = tmp_path / "bad.conf"
    bad.write_text("brokerrole=SYNC_MASTER\n")
    r = _haproof("broker", "--check-config", "-c", str(bad))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert f"{bad}:1: unknown key 'brokerrole'; did you mean brokerRole?" in lines[0]


def test_typo_stops_the_node_with_one_line(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"flushDiskTyp=SYNC_FLUSH\nstorePathRootDir={tmp_path}/store\nlistenPort=0\n")
    r = _haproof("broker", "-c", str(conf))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "did you mean flushDiskType?" in r.stderr
    assert not (tmp_path / "store").exists()


def test_bad_strict_config_value_is_a_config_error(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("strictConfig=maybe\n")
    with pytest.raises(ConfigError, match=r"broker.conf:1: strictConfig='maybe'"):
        BrokerConfig.from_file(str(conf))
