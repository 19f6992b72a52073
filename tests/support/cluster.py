"""broker.conf files for process tests of one broker group (cluster ``C``, group ``broker-a``)."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from tools.localcluster import write_broker_conf


def node_conf(
    tmp_path: Path,
    node: str,
    broker_id: int,
    role: str,
    port: int,
    ha_port: int,
    namesrv: str,
    **extra,
) -> Path:
    """``{tmp_path}/{node}.conf`` for node ``node`` (store ``store-{node}``, 256 KiB commit log
    files); ``extra`` adds or overrides RocketMQ properties."""
    return write_broker_conf(
        tmp_path / f"{node}.conf",
        {
            "brokerClusterName": "C",
            "brokerName": "broker-a",
            "brokerId": broker_id,
            "brokerRole": role,
            "storePathRootDir": tmp_path / f"store-{node}",
            "listenPort": port,
            "haListenPort": ha_port,
            "namesrvAddr": namesrv,
            "nodeName": node,
            "mappedFileSizeCommitLog": 256 * 1024,
            **extra,
        },
    )


def conf_factory(**defaults):
    """A ``node_conf`` with this test module's own defaults (a call's keywords still win)."""
    return functools.partial(node_conf, **defaults)


def knows_topic(addr: str, topic: str) -> bool:
    """Whether the node at ``addr`` holds ``topic``'s config (GET_ALL_TOPIC_CONFIG)."""

    async def main() -> bool:
        client = RemotingClient()
        try:
            req = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)
            resp = await client.invoke(addr, req, 5000)
            return topic in json.loads(resp.body).get("topicConfigTable", {})
        finally:
            await client.close()

    return asyncio.run(main())
