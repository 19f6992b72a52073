"""``haproof admin updateBrokerConfig`` on a real broker process: a runtime key changes what the
node does at once, is persisted to its config file (the rest of the file untouched) and
survives a restart; a read-once key is saved to the file and taken at the next start; black-listed
keys, typos and bad values are refused (exit 2, file unchanged)."""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.client.producer import Producer, SendStatus
from broker.remoting.codes import RequestCode, ResponseCode
from contracts.errors import RemotingError
from tests.node.test_admin_verbs import admin, admin_json, call
from tests.support.cluster import node_conf
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "CfgTopic"


async def _send_one(namesrv: str, size: int) -> SendStatus:
    producer = Producer("PG", [namesrv], retry_times=0)
    try:
        return (await producer.send(TOPIC, b"x" * size)).status
    finally:
        await producer.close()


def send_one(namesrv: str, size: int) -> SendStatus:
    return asyncio.run(_send_one(namesrv, size))


def check_topic_stats_bodies(addr: str) -> None:
    """Without ``strictJson`` (as mqadmin asks) GET_TOPIC_STATS_INFO answers fastjson's
    TopicStatsTable, MessageQueue objects as keys; with it, strict JSON rows."""
    text = call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}).body.decode()
    assert text.startswith('{"offsetTable":{{"brokerName":"broker-a","queueId":0,')
    assert '"topic":"CfgTopic"}:{"lastUpdateTimestamp":' in text
    strict = call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC, "strictJson": "true"})
    assert sum(r["maxOffset"] for r in json.loads(strict.body)["offsetTable"]) == 1
    resp = call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"})
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in resp.remark


def test_update_runtime_key_persists_and_survives_restart(tmp_path):
    ns = start_namesrv(tmp_path)
    port, ha_port = free_port(), free_port()
    conf = node_conf(tmp_path, "m", 0, "ASYNC_MASTER", port, ha_port, ns.addr)
    conf.write_text("# operator's note: keep me\n" + conf.read_text())
    procs = [ns, start_broker("m", conf, port, tmp_path)]
    try:
        m = procs[1]
        assert send_one(ns.addr, 2000) is SendStatus.SEND_OK
        check_topic_stats_bodies(m.addr)

        rows = admin_json(
            "updateBrokerConfig",
            "--broker-addr",
            m.addr,
            "--key",
            "maxMessageSize",
            "--value",
            "1500",
        )
        assert rows == [
            {
                "brokerAddr": m.addr,
                "key": "maxMessageSize",
                "from": "4194304",
                "to": "1500",
                "effect": "now",
            }
        ]
        [doc] = admin_json("getBrokerConfig", "--broker-addr", m.addr)
        assert doc["config"]["maxMessageSize"] == "1500" and doc["version"]["counter"] == 1
        with pytest.raises(RemotingError, match="maxMessageSize|MESSAGE_ILLEGAL|code 13"):
            send_one(ns.addr, 2000)  # the node applies the new limit at once
        assert send_one(ns.addr, 1000) is SendStatus.SEND_OK

        text = conf.read_text()
        assert text.startswith("# operator's note: keep me\n")
        assert text.count("maxMessageSize=") == 1 and "maxMessageSize=1500\n" in text
        assert f"listenPort={port}\n" in text and "nodeName=m\n" in text

        # a read-once key: saved to the file, not applied; the next start reads it
        res = admin(
            "updateBrokerConfig", "-b", m.addr, "--key", "flushIntervalCommitLog", "--value", "250"
        )
        assert res.returncode == 0, res.stderr
        assert "saved; takes effect at the next start" in res.stdout
        [row] = admin_json(
            "updateBrokerConfig", "-b", m.addr, "--key", "flushIntervalCommitLog", "--value", "250"
        )
        assert (row["from"], row["to"], row["effect"]) == ("500", "250", "next start")
        [doc] = admin_json("getBrokerConfig", "--broker-addr", m.addr)
        assert doc["config"]["flushIntervalCommitLog"] == "500"  # running as started
        text = conf.read_text()
        assert text.count("flushIntervalCommitLog=") == 1 and "flushIntervalCommitLog=250\n" in text

        # refused before any node is asked: a black-listed key, a bad value
        res = admin(
            "updateBrokerConfig", "--broker-addr", m.addr, "--key", "brokerName", "--value", "other"
        )
        assert res.returncode == 2 and "'brokerName' cannot be changed by an update" in res.stderr
        res = admin("updateBrokerConfig", "-b", m.addr, "--key", "aclFile", "--value", "/tmp/x")
        assert res.returncode == 2 and "'aclFile' cannot be changed by an update" in res.stderr
        res = admin(
            "updateBrokerConfig",
            "--broker-addr",
            m.addr,
            "--key",
            "maxMessageSize",
            "--value",
            "-1",
        )
        assert res.returncode == 2 and "maxMessageSize='-1'" in res.stderr
        res = admin("updateBrokerConfig", "-b", m.addr, "--key", "maxMesageSize", "--value", "9")
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert "unknown key 'maxMesageSize'; did you mean maxMessageSize?" in res.stderr
        # and by the node itself, for any other client (RocketMQ answers NO_PERMISSION)
        resp = call(m.addr, RequestCode.UPDATE_BROKER_CONFIG, body=b"listenPort=1\n")
        assert resp.code == ResponseCode.NO_PERMISSION and "'listenPort'" in resp.remark
        resp = call(m.addr, RequestCode.UPDATE_BROKER_CONFIG, body=b"slaveReadEnable=maybe\n")
        assert resp.code == ResponseCode.SYSTEM_ERROR and "slaveReadEnable" in resp.remark
        resp = call(m.addr, RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerConfigPath=/x\n")
        assert resp.code == ResponseCode.NO_PERMISSION and "config file's own path" in resp.remark
        resp = call(m.addr, RequestCode.UPDATE_BROKER_CONFIG, body=b"flushIntervalCommitLog=0\n")
        assert resp.code == ResponseCode.SYSTEM_ERROR and "unchanged" in resp.remark
        assert conf.read_text() == text  # nothing written by the refusals

        assert m.stop() == 0
        procs[1] = m = start_broker("m", conf, port, tmp_path)
        [doc] = admin_json("getBrokerConfig", "--broker-addr", m.addr)
        assert doc["config"]["maxMessageSize"] == "1500" and doc["version"]["counter"] == 0
        assert doc["config"]["flushIntervalCommitLog"] == "250"  # the saved key, now in effect
        with pytest.raises(RemotingError):
            send_one(ns.addr, 2000)
    finally:
        for p in procs:
            p.kill()
