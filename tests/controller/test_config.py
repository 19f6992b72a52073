"""Controller config files: strict keys, the name server's file with the controller embedded."""

from __future__ import annotations

import pytest

from broker.controller.cli import read_namesrv_conf
from broker.controller.config import load_controller_config
from contracts.errors import ConfigError


def test_controller_conf_is_strict_and_checked(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("listenPort=9878\nenableElectUncleanMaster=true\n")
    cfg = load_controller_config(str(conf))
    assert cfg.enableElectUncleanMaster is True and cfg.controllerType == "journal"
    for text, message in (
        ("enableElectUncleanMastr=true\n", "did you mean enableElectUncleanMaster"),
        ("enableElectUncleanMaster=yes\n", "true or false"),
        ("listenPort=70000\n", "not a TCP port"),
        ("controllerType=dledger\n", "controllerType"),
        ("brokerHeartbeatTimeoutMaxMs=50\n", "brokerHeartbeatTimeoutMaxMs 50 is outside"),
        (
            "controllerType=jRaft\njRaftInitConf=a:1,b:2\njRaftServerId=a:1\n"
            "jRaftControllerRPCAddr=a:3\n",
            "one remoting address per",
        ),
    ):
        conf.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_controller_config(str(conf))


def test_namesrv_conf_embeds_the_controller_only_when_enabled(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=9877\nrocketmqHome=/opt/rmq\n")
    assert read_namesrv_conf(str(conf)) == (9877, None)
    conf.write_text(
        "listenPort=9877\nenableControllerInNamesrv=true\nnotifyBrokerRoleChanged=false\n"
    )
    port, cfg = read_namesrv_conf(str(conf))
    assert port == 9877 and cfg.listenPort == 9877 and cfg.notifyBrokerRoleChanged is False


def test_broker_conf_controller_mode_keys(tmp_path):
    from broker.config import BrokerConfig

    cfg = BrokerConfig.from_dict(
        {
            "enableControllerMode": "true",
            "controllerAddr": "127.0.0.1:9878;127.0.0.1:9879",
            "brokerHeartbeatInterval": "500",
            "controllerHeartBeatTimeoutMills": "4000",
            "syncBrokerMetadataPeriod": "1000",
            "brokerElectionPriority": "3",
            "controllerLeaseMills": "3000",
            "storePathRootDir": str(tmp_path),
        }
    )
    assert cfg.enable_controller_mode and cfg.controller_addrs == [
        "127.0.0.1:9878",
        "127.0.0.1:9879",
    ]
    assert BrokerConfig(store_path_root_dir=str(tmp_path)).enable_controller_mode is False
    lease = {"controllerAddr": "127.0.0.1:1", "controllerLeaseMills": "9000"}
    for props, message in (
        ({"enableControllerMode": "true"}, "needs controllerAddr"),
        ({"enableControllerMode": "true", "controllerAddr": "nope"}, "not host:port"),
        ({"enableControllerMode": "true", **lease}, "80%"),
        (
            {"enableControllerMode": "true", **lease, "controllerLeaseMills": "8000"}
            | {"brokerHeartbeatInterval": "1500"},
            r"controllerLeaseMills.*plus brokerHeartbeatInterval \(1500\) must be at most 90%",
        ),
        ({"brokerHeartbeatInterval": "0"}, "must be positive"),
    ):
        with pytest.raises(ConfigError, match=message):
            BrokerConfig.from_dict({**props, "storePathRootDir": str(tmp_path)})


def test_the_raft_leader_fallback_is_checked_against_the_election_timeout(tmp_path):
    conf = tmp_path / "c.conf"
    raft = (
        "controllerType=jRaft\njRaftInitConf=a:1\njRaftServerId=a:1\njRaftControllerRPCAddr=a:3\n"
    )
    conf.write_text(raft)
    cfg = load_controller_config(str(conf))
    assert cfg.leader_fallback_ms == 500 and cfg.append_period_ms == 100  # half of 1000
    conf.write_text(raft + "jRaftElectionTimeoutMs=3000\njRaftLeaderFallbackTimeoutMs=2500\n")
    assert load_controller_config(str(conf)).leader_fallback_ms == 2500
    for extra in ("1000", "150", "-5", "999999"):
        conf.write_text(raft + f"jRaftLeaderFallbackTimeoutMs={extra}\n")
        with pytest.raises(ConfigError) as err:
            load_controller_config(str(conf))
        line = str(err.value)
        assert "\n" not in line and "jRaftLeaderFallbackTimeoutMs" in line
        assert "jRaftElectionTimeoutMs 1000" in line, line
    conf.write_text("jRaftLeaderFallbackTimeoutMs=150\n")  # the journal: no Raft leader
    assert load_controller_config(str(conf)).leader_fallback_ms == 0


def test_a_heartbeat_longer_than_the_configured_maximum_is_refused_naming_the_key(tmp_path):
    """A broker's lease could outlast the grace a restarted controller gives an unheard-of
    master (brokerHeartbeatTimeoutMaxMs): its heartbeat is refused, saying what to change."""
    import asyncio

    from broker.clock import DrivenClock
    from broker.controller.config import ControllerConfig
    from broker.controller.controller import Controller
    from broker.controller.journal import Journal
    from broker.controller.processor import ControllerProcessor
    from broker.controller.state_machine import ControllerStateMachine
    from broker.remoting.codes import RequestCode as Q
    from broker.remoting.codes import ResponseCode as RC
    from broker.remoting.command import RemotingCommand

    sm = ControllerStateMachine()
    journal = Journal(tmp_path / "ctl", sm)
    journal.open()
    cfg = ControllerConfig(brokerHeartbeatTimeoutMaxMs=20_000)
    ctl = Controller(cfg, journal, sm, clock=DrivenClock(), self_addr="127.0.0.1:9878")
    beat = ControllerProcessor(ctl).handlers()[Q.BROKER_HEARTBEAT]
    fields = {
        "clusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:10911",
        "brokerId": "1",
    }
    try:
        for timeout_ms, code in ((20_000, RC.SUCCESS), (20_001, RC.CONTROLLER_INVALID_REQUEST)):
            req = RemotingCommand.request(
                Q.BROKER_HEARTBEAT, {**fields, "heartbeatTimeoutMills": timeout_ms}
            )
            resp = asyncio.run(beat(None, req))
            assert resp.code == code, resp.remark
        assert "brokerHeartbeatTimeoutMaxMs 20000" in resp.remark
        assert "controllerHeartBeatTimeoutMills" in resp.remark
    finally:
        journal.close()
