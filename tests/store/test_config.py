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
