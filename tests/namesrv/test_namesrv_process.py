import asyncio
import json
import signal
import zlib

import pytest

from broker.remoting.client import connect
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tools.localcluster import start_namesrv


@pytest.fixture
def namesrv(tmp_path):
    ns = start_namesrv(tmp_path)
    yield ns.proc, ns.addr
    ns.kill()


def _register(broker_id, addr, compressed=False):
    body = json.dumps(
        {
            "topicConfigSerializeWrapper": {
                "topicConfigTable": {
                    "TopicA": {
                        "topicName": "TopicA",
                        "readQueueNums": 8,
                        "writeQueueNums": 8,
                        "perm": 6,
                    }
                },
                "dataVersion": {"counter": 3, "timestamp": 1},
            },
            "filterServerList": [],
        }
    ).encode()
    if compressed:
        body = zlib.compress(body)
    return RemotingCommand.request(
        RequestCode.REGISTER_BROKER,
        {
            "brokerName": "broker-a",
            "brokerAddr": addr,
            "clusterName": "DefaultCluster",
            "haServerAddr": addr.replace("10911", "10912"),
            "brokerId": broker_id,
            "compressed": compressed,
        },
        body,
    )


def test_register_route_cluster_info_and_sigterm(namesrv):
    proc, addr = namesrv

    async def main():
        conn = await connect(addr)
        r = await conn.invoke(_register(0, "127.0.0.1:10911"))
        assert r.code == ResponseCode.SUCCESS
        r = await conn.invoke(_register(1, "127.0.0.2:10911", compressed=True))
        assert r.code == 0 and r.ext_fields["masterAddr"] == "127.0.0.1:10911"
        assert r.ext_fields["haServerAddr"] == "127.0.0.1:10912"
        r = await conn.invoke(RemotingCommand.request(105, {"topic": "TopicA"}))
        route = json.loads(r.body)
        assert r.code == 0 and route["brokerDatas"][0]["brokerAddrs"] == {
            "0": "127.0.0.1:10911",
            "1": "127.0.0.2:10911",
        }
        assert route["queueDatas"][0]["writeQueueNums"] == 8
        r = await conn.invoke(RemotingCommand.request(105, {"topic": "Nope"}))
        assert r.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in r.remark
        r = await conn.invoke(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        assert json.loads(r.body)["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
        r = await conn.invoke(RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"key": "k"}))
        assert r.code == ResponseCode.QUERY_NOT_FOUND
        bad = _register(0, "127.0.0.3:10911")
        del bad.ext_fields["brokerName"]
        r = await conn.invoke(bad)
        assert r.code == ResponseCode.SYSTEM_ERROR and "'brokerName'" in r.remark
        bad = _register(0, "127.0.0.3:10911")
        bad.body = b"not json"
        r = await conn.invoke(bad)
        assert r.code == ResponseCode.SYSTEM_ERROR and "RegisterBrokerBody" in r.remark
        await conn.close()

    asyncio.run(main())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
