"""The master's HAConnection seen by a hand-made slave: frame sizes and file boundaries,
heartbeats when idle, housekeeping on silence, and a slave too far behind."""

from __future__ import annotations

import asyncio

from broker.ha import wire
from broker.node import BrokerNode
from broker.store.results import PutMessageStatus
from tests.ha.test_replication import FILE_SIZE, _config, log_bytes, put, stop, wait_for
from tests.support.aio import async_test


async def read_frame(reader) -> tuple[int, bytes]:
    async with asyncio.timeout(20):
        offset, size = wire.read_header(await reader.readexactly(wire.TRANSFER_HEADER.size))
        return offset, await reader.readexactly(size) if size else b""


@async_test
async def test_frames_respect_batch_size_and_file_ends_then_heartbeat_then_housekeeping(
    tmp_path, driven_clock
):
    """Heartbeats and housekeeping by ticks of the master's driven clock."""
    clock = driven_clock

    master = await BrokerNode.start(
        _config(
            tmp_path,
            "m",
            haTransferBatchSize=4096,
            haSendHeartbeatInterval=200,
            haHousekeepingInterval=1500,
        ),
        "127.0.0.1",
        clock=clock,
    )
    try:
        for i in range(600):  # ~400 KB: two commit log files
            await put(master, i)
        end = master.store.max_phy_offset
        assert end > FILE_SIZE
        start = FILE_SIZE - 1000  # the master starts wherever the slave says it is
        reader, writer = await asyncio.open_connection("127.0.0.1", master.replication.ha.port)
        writer.write(wire.build_report(start))
        await writer.drain()
        pos, got = start, bytearray()
        while pos < end:
            offset, body = await read_frame(reader)
            assert offset == pos and body, (offset, pos, len(body))
            assert len(body) <= 4096
            assert offset // FILE_SIZE == (offset + len(body) - 1) // FILE_SIZE, (
                f"frame [{offset}, {offset + len(body)}) crosses a file end"
            )
            got += body
            pos += len(body)
            writer.write(wire.build_report(pos))
            await writer.drain()
        assert pos == end and bytes(got) == log_bytes(master, start, end)
        await wait_for(
            lambda: master.replication.ha.status()["slaves"][0]["ackOffset"] == end, what="ack"
        )

        # Idle: a heartbeat (size 0 at the current end) when the interval has passed.
        await clock.advance(200)
        assert await read_frame(reader) == (end, b"")
        # Silent slave: the master closes after haHousekeepingInterval of its clock since
        # the last report (at 0), not before.
        await clock.advance(1299)
        assert master.replication.ha.status()["slaves"], "closed before the housekeeping"
        await clock.advance(1)
        async with asyncio.timeout(20):
            while await reader.read(4096):
                pass  # the heartbeats sent until then, then the end of the stream
        await wait_for(lambda: not master.replication.ha.status()["slaves"], what="connection gone")
        writer.close()
    finally:
        await stop(master)


@async_test
async def test_slave_too_far_behind_is_slave_not_available(tmp_path):
    master = await BrokerNode.start(
        _config(
            tmp_path,
            "m",
            brokerRole="SYNC_MASTER",
            haSlaveFallbehindMax=10_000,
            syncFlushTimeout=300,
        ),
        "127.0.0.1",
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", master.replication.ha.port)

        async def stuck_at_zero():  # alive (heartbeats) but never acknowledges anything
            while True:
                writer.write(wire.build_report(0))
                await writer.drain()
                await asyncio.sleep(0.2)  # the heartbeat interval of this fake slave

        heartbeats = asyncio.create_task(stuck_at_zero())
        try:
            await wait_for(lambda: master.replication.ha.status()["slaves"], what="slave connected")
            _, status = await put(master, 0, size=4000)
            assert status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT  # close enough: it waits
            i = 1
            while master.store.max_phy_offset < 10_000:
                await put(master, i, size=4000)
                i += 1
            assert master.replication.ha.status()["slaves"], "the lagging slave is still connected"
            _, status = await put(master, i, size=4000)
            # too far behind: refused before waiting (a wait would end in a timeout)
            assert status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        finally:
            heartbeats.cancel()
            writer.close()
    finally:
        await stop(master)
