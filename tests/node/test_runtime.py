"""GET_BROKER_RUNTIME_INFO (28): KVTable with RocketMQ key names and the services' keys;
BrokerStats TPS windows and day roll-over with an injected clock."""

import asyncio
import json

from broker.config import BrokerConfig
from broker.node import BrokerNode
from broker.processors.runtime import BrokerStats
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.properties import properties_to_string


class Clock:
    def __init__(self, now_ms):
        self.now_ms = now_ms

    def __call__(self):
        return self.now_ms


def test_tps_windows_and_totals_follow_the_samples():
    clock = Clock(1_700_000_000_000)
    stats = BrokerStats(clock)
    for _ in range(20):  # 20 s at 100 puts/s, 7 transferred/s
        clock.now_ms += 1000
        stats.on_put("T", 100, 100 * 1024)
        stats.on_get(True, 7)
        stats.sample()
    info = stats.runtime_info()
    assert info["putTps"] == "100.00 100.00 100.00"
    assert info["getTransferedTps"] == "7.00 7.00 7.00"
    assert info["msgPutTotalTodayNow"] == "2000"
    assert info["putMessageAverageSize"] == "1024.00"
    assert info["runtime"] == "[ 0 days, 0 hours, 0 minutes, 20 seconds ]"
    # a quiet 10 s: the 10 s window drops to 0, the minute window still sees traffic
    for _ in range(10):
        clock.now_ms += 1000
        stats.sample()
    ten_s, one_min, _ = (float(v) for v in stats.runtime_info()["putTps"].split())
    assert ten_s == 0.0 and 0 < one_min < 100


def test_day_rollover_moves_the_morning_totals():
    clock = Clock(1_700_000_000_000)
    stats = BrokerStats(clock)
    stats.on_put("T", 5, 50)
    clock.now_ms += 86_400_000
    stats.sample()
    stats.on_put("T", 2, 20)
    info = stats.runtime_info()
    assert info["msgPutTotalTodayMorning"] == "5"
    assert info["msgPutTotalTodayNow"] == "7"
    assert info["msgPutTotalYesterdayMorning"] == "0"


def test_runtime_info_over_the_wire(tmp_path):
    async def main():
        config = BrokerConfig.from_dict(
            {"storePathRootDir": str(tmp_path / "store"), "listenPort": 0}
        )
        node = await BrokerNode.start(config, "127.0.0.1")
        client = RemotingClient()
        addr = f"127.0.0.1:{node.server.port}"
        try:
            for i in range(3):
                req = RemotingCommand.request(
                    RequestCode.SEND_MESSAGE_V2,
                    {
                        "a": "PG",
                        "b": "RT",
                        "c": "TBW102",
                        "d": 4,
                        "e": 0,
                        "f": 0,
                        "g": 1,
                        "h": 0,
                        "i": properties_to_string({"DELAY": "1"} if i == 2 else {}),
                        "j": 0,
                        "k": False,
                        "m": False,
                    },
                    b"x" * 100,
                )
                assert (await client.invoke(addr, req)).code == ResponseCode.SUCCESS
            pull = RemotingCommand.request(
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "CG",
                    "topic": "RT",
                    "queueId": 0,
                    "queueOffset": 0,
                    "maxMsgNums": 32,
                    "sysFlag": 0,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                },
            )
            assert (await client.invoke(addr, pull)).code == ResponseCode.SUCCESS
            r = await client.invoke(
                addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
            )
            assert r.code == ResponseCode.SUCCESS
            table = json.loads(r.body)["table"]
            assert all(isinstance(v, str) for v in table.values())
            assert table["msgPutTotalTodayNow"] == "3"
            assert table["msgGetTotalTodayNow"] == "2"
            assert int(table["commitLogMaxOffset"]) == node.store.max_phy_offset > 0
            assert table["commitLogMinOffset"] == "0"
            assert table["brokerVersionDesc"].startswith("V4_")
            assert len(table["putTps"].split()) == 3
            assert table["scheduleMessageOffset_1"] in ("0,1", "1,1")  # services add keys
        finally:
            await client.close()
            await node.stop()

    asyncio.run(main())
