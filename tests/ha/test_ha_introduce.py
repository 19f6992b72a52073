"""A slave's introduction to its master (EXCHANGE_BROKER_HA_INFO: which node and controller id
this HA connection is) is tried again until it gets through, while the connection lasts: a
master that never learns the id never counts the slave in its SyncStateSet (seen in
``haproof bench failover``: a stale peer connection reset the one try, the slave replicated
but stayed out of the set for good)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.clock import DrivenClock
from broker.config import BrokerConfig
from broker.ha.client import HAClient
from broker.store.role import BrokerRoleState
from contracts.errors import RemotingError


class _Writer:
    def __init__(self) -> None:
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 5555)


def _client(tmp_path, clock: DrivenClock, failures: int):
    config = BrokerConfig.from_dict(
        {"storePathRootDir": str(tmp_path), "brokerRole": "SLAVE", "brokerId": 3}
    )
    calls: list[dict] = []

    async def invoke(addr, req, timeout_ms):
        calls.append(dict(req.ext_fields, addr=addr))
        if len(calls) <= failures:
            raise RemotingError(f"{addr}: connection closed: [Errno 104] Connection reset")
        return SimpleNamespace(code=0)

    role = BrokerRoleState.configured(config)
    reconciler = SimpleNamespace(role=role, client=SimpleNamespace(invoke=invoke))
    store = SimpleNamespace(max_phy_offset=0)
    client = HAClient(
        store, config, role, node_name="n2", namesrv_addrs=[], reconciler=reconciler, clock=clock
    )
    client.master_addr = "127.0.0.1:30335"
    return client, calls


def test_a_failed_introduction_is_tried_again_until_the_master_has_it(tmp_path):
    async def main():
        clock = DrivenClock()
        client, calls = _client(tmp_path, clock, failures=3)
        task = asyncio.create_task(client._introduce(_Writer()))
        for _ in range(100):
            if task.done():
                break
            await clock.advance(100)
        assert task.done() and task.exception() is None
        assert len(calls) == 4  # three refused, the fourth got through
        assert {c["brokerId"] for c in calls} == {"3"} and calls[0]["nodeName"] == "n2"
        assert {c["addr"] for c in calls} == {"127.0.0.1:30335"}

    asyncio.run(main())


def test_introduction_stops_trying_once_the_connection_closes(tmp_path):
    async def main():
        clock = DrivenClock()
        client, calls = _client(tmp_path, clock, failures=10**6)
        writer = _Writer()
        task = asyncio.create_task(client._introduce(writer))
        await clock.advance(1000)
        tried = len(calls)
        assert 2 <= tried and not task.done()
        writer.closing = True
        await clock.advance(10_000)
        assert task.done() and len(calls) <= tried + 1

    asyncio.run(main())
