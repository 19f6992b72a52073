"""Classic HA between two in-process nodes over real sockets on 127.0.0.1.

Each test runs a master and (usually) a slave node in one event loop; conditions are polled with
a deadline, never slept on.
"""

from __future__ import annotations

import asyncio
import functools
import os
import struct
import time

from broker.config import BrokerConfig
from broker.ha import wire
from broker.node import BrokerNode
from broker.store.results import PutMessageStatus
from contracts.record.model import Message
from contracts.record.reader import decode_record
from tests.support.aio import async_test
from tests.support.waiting import wait_for as support_wait_for

FILE_SIZE = 256 * 1024


def _config(tmp_path, name: str, **kw) -> BrokerConfig:
    return BrokerConfig.from_dict(
        {
            "storePathRootDir": str(tmp_path / name),
            "brokerName": "broker-a",
            "listenPort": 0,
            "mappedFileSizeCommitLog": FILE_SIZE,
            "haSendHeartbeatInterval": 200,
            "haHousekeepingInterval": 3000,
            **kw,
        }
    )


wait_for = functools.partial(support_wait_for, timeout_ms=20_000)  # tests/support/waiting.py


async def start_pair(tmp_path, role="ASYNC_MASTER", start_slave=True, **kw):
    master = await BrokerNode.start(_config(tmp_path, "m", brokerRole=role, **kw), "127.0.0.1")
    slave = None
    if start_slave:
        slave = await BrokerNode.start(
            _config(
                tmp_path,
                "s",
                brokerRole="SLAVE",
                brokerId=1,
                haMasterAddress=f"127.0.0.1:{master.replication.ha.port}",
                **kw,
            ),
            "127.0.0.1",
        )
    return master, slave


def message(i: int, size: int = 600, topic: str = "T") -> Message:
    return Message(
        topic=topic,
        body=(f"m{i}-".encode() * size)[:size],
        queue_id=i % 4,
        properties={"TAGS": f"t{i % 3}", "KEYS": f"k{i}"},
        born_host=("127.0.0.1", 5555),
    )


async def put(node: BrokerNode, i: int, **kw):
    result = await node.store.put_message_async(message(i, **kw))
    return result, await node.await_replication(result)


def log_bytes(node: BrokerNode, start: int, end: int) -> bytes:
    out = bytearray()
    pos = start
    while pos < end:
        chunk = node.store.commit_log.read(pos, end - pos)
        assert chunk, f"no bytes at {pos}"
        out += chunk
        pos += len(chunk)
    return bytes(out)


async def stop(*nodes):
    for n in nodes:
        if n is not None:
            await n.stop()


@async_test
async def test_slave_log_is_byte_identical_and_serves_pulls(tmp_path):
    master, slave = await start_pair(tmp_path)
    try:
        await wait_for(lambda: master.replication.ha.status()["slaves"], what="slave connected")
        for i in range(1500):  # ~1 MB: several 256 KiB files, BLANK fillers included
            res, status = await put(master, i)
            assert status is PutMessageStatus.PUT_OK
        end = master.store.max_phy_offset
        await wait_for(lambda: slave.store.max_phy_offset == end, what="slave catch-up")
        assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
        await wait_for(
            lambda: master.replication.ha.status()["slaves"][0]["ackOffset"] == end,
            what="ack reaches end",
        )
        # The slave dispatched what it received: its consume queues serve reads.
        for qid in range(4):
            assert slave.store.get_max_offset_in_queue("T", qid) == 375
        got = slave.store.get_message("T", 2, 370, 32, None)
        bodies = [decode_record(r, 0).body for r in got.records]
        assert [b[:6] for b in bodies] == [f"m{i}-".encode()[:6] for i in range(1482, 1500, 4)]
    finally:
        await stop(slave, master)


@async_test
async def test_sync_master_answers_after_the_slave_acks(tmp_path):
    master, slave = await start_pair(tmp_path, role="SYNC_MASTER")
    try:
        await wait_for(lambda: master.replication.ha.status()["slaves"], what="slave connected")
        for i in range(50):
            res, status = await put(master, i)
            assert status is PutMessageStatus.PUT_OK
            # Acknowledged means on the slave already.
            assert slave.store.max_phy_offset >= res.end_offset
            assert master.replication.ha.push2slave_max >= res.end_offset
    finally:
        await stop(slave, master)


@async_test
async def test_sync_master_without_slave_is_slave_not_available(tmp_path):
    master, _ = await start_pair(tmp_path, role="SYNC_MASTER", start_slave=False)
    try:
        res, status = await put(master, 0)
        assert res.status is PutMessageStatus.PUT_OK  # stored locally...
        assert status is PutMessageStatus.SLAVE_NOT_AVAILABLE  # ...but not replicated
    finally:
        await stop(master)


@async_test
async def test_sync_master_times_out_when_the_slave_stops_acking(tmp_path):
    master, _ = await start_pair(
        tmp_path, role="SYNC_MASTER", start_slave=False, syncFlushTimeout=300
    )
    try:
        # A "slave" that reports once and then never acknowledges anything.
        reader, writer = await asyncio.open_connection("127.0.0.1", master.replication.ha.port)
        writer.write(wire.build_report(0))
        await writer.drain()
        await wait_for(lambda: master.replication.ha.status()["slaves"], what="fake slave seen")
        t0 = time.monotonic()
        res, status = await put(master, 1)
        assert status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - t0 >= 0.25
        writer.close()
    finally:
        await stop(master)


@async_test
async def test_fresh_slave_is_fed_from_the_start_of_the_masters_last_file(tmp_path):
    master, _ = await start_pair(tmp_path, start_slave=False)
    try:
        for i in range(700):  # > 1 file of 256 KiB
            await put(master, i)
        end = master.store.max_phy_offset
        last_start = end - end % FILE_SIZE
        assert last_start > 0
        slave = await BrokerNode.start(
            _config(
                tmp_path,
                "s",
                brokerRole="SLAVE",
                brokerId=1,
                haMasterAddress=f"127.0.0.1:{master.replication.ha.port}",
            ),
            "127.0.0.1",
        )
        try:
            await wait_for(lambda: slave.store.max_phy_offset == end, what="catch-up")
            assert slave.store.commit_log.min_offset == last_start
            assert log_bytes(slave, last_start, end) == log_bytes(master, last_start, end)
            names = sorted(os.listdir(tmp_path / "s" / "commitlog"))
            assert names == [f"{last_start:020d}"]
        finally:
            await stop(slave)
    finally:
        await stop(master)


@async_test
async def test_garbage_and_wrong_offsets_on_the_ha_port_drop_only_that_connection(tmp_path):
    master, slave = await start_pair(tmp_path)
    try:
        await wait_for(lambda: master.replication.ha.status()["slaves"], what="slave connected")
        for i in range(20):
            await put(master, i)
        end = master.store.max_phy_offset
        await wait_for(lambda: slave.store.max_phy_offset == end, what="catch-up")
        for junk in (
            struct.pack(">q", end + 10_000),  # beyond the master's log
            struct.pack(">q", -3),  # negative
            b"GET / HTTP/1.1\r\n\r\n",  # not HA at all
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", master.replication.ha.port)
            writer.write(junk)
            await writer.drain()
            # frames may come first; then the master closes the connection
            while await asyncio.wait_for(reader.read(65536), 10):
                pass
            writer.close()
        # The real slave still replicates.
        for i in range(20, 40):
            await put(master, i)
        end = master.store.max_phy_offset
        await wait_for(lambda: slave.store.max_phy_offset == end, what="catch-up again")
        assert len(master.replication.ha.status()["slaves"]) == 1
    finally:
        await stop(slave, master)


@async_test
async def test_slave_drops_a_master_sending_the_wrong_offset_and_reconnects(tmp_path):
    # A fake master that first sends a frame at the wrong offset, then behaves.
    connections = []

    async def fake_master(reader, writer):
        connections.append(writer)
        (offset,) = struct.unpack(">q", await reader.readexactly(8))
        if len(connections) == 1:
            writer.write(wire.build_header(offset + 100, 4) + b"junk")
        else:
            writer.write(wire.build_header(0, 0))  # a heartbeat: nothing to append
        await writer.drain()
        try:
            await reader.read()
        finally:
            writer.close()

    server = await asyncio.start_server(fake_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    slave = await BrokerNode.start(
        _config(tmp_path, "s", brokerRole="SLAVE", brokerId=1, haMasterAddress=f"127.0.0.1:{port}"),
        "127.0.0.1",
    )
    try:
        await wait_for(lambda: len(connections) >= 2, what="reconnect")
        assert slave.store.max_phy_offset == 0  # the bad frame was not appended
        assert slave.replication.ha_client.connects >= 2
    finally:
        await stop(slave)
        server.close()


@async_test
async def test_master_keeps_a_history_of_rising_acks(tmp_path):
    master, slave = await start_pair(tmp_path)
    try:
        await wait_for(lambda: master.replication.ha.status()["slaves"], what="slave connected")
        for i in range(30):
            await put(master, i)
        end = master.store.max_phy_offset
        await wait_for(lambda: master.replication.ha.push2slave_max == end, what="acked")
        hist = list(master.replication.ha.ack_history)
        assert hist[-1][1] == end
        assert all(a[0] <= b[0] and a[1] < b[1] for a, b in zip(hist, hist[1:], strict=False))
    finally:
        await stop(slave, master)


def test_an_empty_slave_starts_at_the_first_byte_in_controller_mode_unless_told_the_last_file():
    """RocketMQ 5's AutoSwitch HA serves an empty slave from the master's first byte
    (``syncFromLastFile=false``): a slave fed from the last file lacks the history, yet may be
    elected (sim seed 910001264). Classic HA keeps the last file's start."""
    from types import SimpleNamespace

    from broker.ha.service import HAConnection

    store = SimpleNamespace(min_phy_offset=FILE_SIZE, max_phy_offset=3 * FILE_SIZE + 100)

    def start(keeper, **kw) -> int:
        cfg = BrokerConfig.from_dict({"mappedFileSizeCommitLog": FILE_SIZE, **kw})
        service = SimpleNamespace(
            store=store,
            config=cfg,
            sync_state=keeper,
            clock=SimpleNamespace(monotonic_ms=lambda: 0.0),
        )
        conn = HAConnection.__new__(HAConnection)
        conn.service, conn.request_offset = service, 0
        return conn._start_offset()

    assert start(keeper=object()) == FILE_SIZE  # controller mode: the master's first byte
    assert start(keeper=object(), syncFromLastFile="true") == 3 * FILE_SIZE
    assert start(keeper=None) == 3 * FILE_SIZE  # classic HA, as RocketMQ's DefaultHAConnection
