"""Read-from-slave advice: suggestWhichBrokerId in a master's pull response."""

from __future__ import annotations

from broker.config import BrokerConfig
from broker.ha.read_advice import suggest_which_broker_id
from broker.node import BrokerNode
from broker.processors.pull import PullProcessor
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.config_store import topic_config
from tests.ha.test_replication import _config, put
from tests.support.aio import async_test


def _cfg(**kw) -> BrokerConfig:
    return BrokerConfig.from_dict({"storePathRootDir": "/nonexistent", **kw})


def test_suggestion_follows_the_memory_ratio_and_slave_read_enable():
    on = _cfg(slaveReadEnable="true", accessMessageInMemoryMaxRatio=40)
    # 40 % of 10,000 bytes = 4,000 bytes may stay behind the log end.
    assert suggest_which_broker_id(on, 10_000, 5_999, 10_000) == 1
    assert suggest_which_broker_id(on, 10_000, 6_000, 10_000) == 0
    assert suggest_which_broker_id(on, 10_000, -1, 10_000) == 0  # nothing was read
    off = _cfg(accessMessageInMemoryMaxRatio=40)
    assert suggest_which_broker_id(off, 10_000, 0, 10_000) == 0


@async_test
async def test_master_pull_suggests_the_slave_when_far_behind(tmp_path):
    nodes = []
    try:
        for name, read in (("on", "true"), ("off", "false")):
            node = await BrokerNode.start(
                _config(tmp_path, name, slaveReadEnable=read), "127.0.0.1"
            )
            nodes.append(node)
            node.store.topic_config.put("T", topic_config("T", 4))
            for i in range(40):  # 600-byte bodies on queue i % 4
                await put(node, i)
            pull = PullProcessor(node.store, node.config, node.consumers, node.long_poll)
            pull.physical_memory_bytes = 20_000  # injected: 40 % = 8,000 bytes

            async def suggestion(offset: int, pull=pull) -> int:
                req = RemotingCommand.request(
                    RequestCode.PULL_MESSAGE,
                    {
                        "consumerGroup": "g",
                        "topic": "T",
                        "queueId": 0,
                        "queueOffset": offset,
                        "maxMsgNums": 1,
                        "sysFlag": 0,
                        "commitOffset": 0,
                        "suspendTimeoutMillis": 0,
                        "subscription": "*",
                    },
                )
                resp = await pull.pull(None, req)
                assert resp.code == ResponseCode.SUCCESS
                return int(resp.ext_fields["suggestWhichBrokerId"])

            first, last = await suggestion(0), await suggestion(9)
            if read == "true":
                assert (first, last) == (1, 0)  # ~24 KB behind vs ~0 behind
            else:
                assert (first, last) == (0, 0)
    finally:
        for node in nodes:
            await node.stop()
