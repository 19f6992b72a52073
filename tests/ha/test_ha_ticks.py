"""HA heartbeats and housekeeping by ticks of a driven clock (tests/conftest.py
``driven_clock``): bytes travel over real sockets on 127.0.0.1, but when a heartbeat is due and
when silence drops a connection is the clock's decision, so a test moves time instead of
waiting for it (issue #24)."""

from __future__ import annotations

import asyncio
import functools

from broker.config import BrokerConfig, BrokerRole
from broker.ha import wire
from broker.ha.client import HAClient
from broker.ha.group_transfer import GroupTransferService
from broker.node import BrokerNode
from broker.store.message_store import MessageStore
from broker.store.results import PutMessageStatus
from broker.store.role import BrokerRoleState
from tests.support.aio import async_test
from tests.support.waiting import wait_for as support_wait_for

wait_for = functools.partial(support_wait_for, timeout_ms=10_000)


def _config(tmp_path, name: str, **kw) -> BrokerConfig:
    return BrokerConfig.from_dict(
        {
            "storePathRootDir": str(tmp_path / name),
            "brokerName": "broker-a",
            "listenPort": 0,
            "mappedFileSizeCommitLog": 256 * 1024,
            "haSendHeartbeatInterval": 200,
            "haHousekeepingInterval": 1000,
            **kw,
        }
    )


@async_test
async def test_master_heartbeats_reach_the_slave_at_the_ticks(tmp_path, driven_clock):
    clock = driven_clock

    master = await BrokerNode.start(_config(tmp_path, "m"), "127.0.0.1", clock=clock)
    ha_addr = f"127.0.0.1:{master.replication.ha.port}"
    slave_conf = _config(tmp_path, "s", brokerRole="SLAVE", brokerId=1, haMasterAddress=ha_addr)
    slave = await BrokerNode.start(slave_conf, "127.0.0.1", clock=clock)
    try:
        await wait_for(lambda: master.replication.ha.status()["slaves"], what="slave seen")
        client = slave.replication.ha_client
        assert client.connected and client.last_frame_at_ms is None  # empty log: no frame
        for tick in (200, 400, 600):
            await clock.advance(200)  # the master's heartbeat is due: a 0-byte frame
            await wait_for(lambda t=tick: client.last_frame_at_ms == t, what=f"frame at {tick}")
        assert client.connects == 1  # and nobody's silence dropped the connection
    finally:
        await slave.stop()
        await master.stop()


@async_test
async def test_a_silent_master_is_dropped_at_the_housekeeping_tick(tmp_path, driven_clock):
    """The slave reports every haSendHeartbeatInterval and drops a master silent for
    haHousekeepingInterval, both by ticks: 999 ms of silence keeps the connection, 1000 drops
    it."""
    clock = driven_clock

    reports: list[int] = []

    async def silent_master(reader, writer):
        try:
            while True:
                reports.append(wire.read_report(await reader.readexactly(wire.REPORT.size)))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(silent_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = _config(tmp_path, "s", brokerRole="SLAVE", brokerId=1)
    store = MessageStore.open(config)
    role = BrokerRoleState.configured(config)
    assert role.role is BrokerRole.SLAVE
    client = HAClient(store, config, role, node_name="s", namesrv_addrs=[], clock=clock)
    client.set_master(f"127.0.0.1:{port}")
    await client.start()
    try:
        await wait_for(lambda: reports, what="the first report")
        await clock.advance(999)  # reports at 200, 400, 600, 800; still inside the limit
        await wait_for(lambda: len(reports) == 5, what="four heartbeat reports")
        assert client.connected
        await clock.advance(1)
        await wait_for(lambda: not client.connected, what="the silent master dropped")
        assert client.connects == 1  # the reconnect waits for its back-off, on the clock
    finally:
        await client.stop()
        server.close()
        await server.wait_closed()
        store.shutdown()


@async_test
async def test_sync_puts_time_out_at_their_tick_and_acks_release_them(driven_clock):
    """GroupTransferService: a put waiting for its slaves times out when the driven clock
    passes its deadline, not before; an acknowledgement past its end releases it at once."""
    clock = driven_clock

    transfer = GroupTransferService(clock)
    transfer.start()
    try:
        slow = asyncio.ensure_future(transfer.wait(100, 500))
        await clock.advance(200)
        acked = asyncio.ensure_future(transfer.wait(200, 500))  # deadline at 700
        await clock.advance(299)
        assert not slow.done() and not acked.done()
        await clock.advance(1)  # 500: the first put's deadline
        assert slow.result() is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert not acked.done()
        transfer.on_ack(250)
        await clock.settle()
        assert acked.result() is PutMessageStatus.PUT_OK
        late = asyncio.ensure_future(transfer.wait(300, 500))
        await clock.settle()
    finally:
        await transfer.stop()
    assert await late is PutMessageStatus.FLUSH_SLAVE_TIMEOUT  # stopping answers the rest
