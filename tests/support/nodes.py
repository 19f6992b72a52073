"""Running a broker node in a test process, on 127.0.0.1: ``node_config`` (a store under
``tmp_path``, an OS-chosen port, 1 MiB commit log files) and ``run_node`` (start it, run the
test's ``body(node, client, addr)``, stop it whatever happens)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import BrokerConfig
from broker.node import BrokerNode
from broker.remoting.client import RemotingClient

Body = Callable[[BrokerNode, RemotingClient, str], Awaitable[None]]


def node_config(tmp_path: Path, **props) -> BrokerConfig:
    """A node's config from RocketMQ property names; ``props`` add or override."""
    return BrokerConfig.from_dict(
        {
            "storePathRootDir": str(tmp_path / "store"),
            "listenPort": 0,
            "mappedFileSizeCommitLog": 1 << 20,
            **props,
        }
    )


def run_node(
    tmp_path: Path, body: Body, *, rpc_hook=None, clock: Clock = SYSTEM_CLOCK, **props
) -> None:
    """Start a node on 127.0.0.1, run ``await body(node, client, addr)``, stop it."""

    async def main() -> None:
        node = await BrokerNode.start(node_config(tmp_path, **props), "127.0.0.1", clock=clock)
        client = RemotingClient(rpc_hook=rpc_hook)
        try:
            await body(node, client, f"127.0.0.1:{node.server.port}")
        finally:
            await client.close()
            await node.stop()

    asyncio.run(main())


def free_port() -> int:
    """A port free now on 127.0.0.1, outside the ephemeral range (tools/localcluster.py)."""
    from tools.localcluster import free_port as pick

    return pick()
