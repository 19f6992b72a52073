"""The master's HA port is bounded: at most haMaxConnections peers, each refusal logged once per
host, and a peer that connects and never reports is closed after haHousekeepingInterval."""

from __future__ import annotations

import asyncio
import logging

from broker.ha import wire
from broker.node import BrokerNode
from tests.ha.test_replication import _config, stop, wait_for


async def _closed(reader, timeout_s: float = 10.0) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            while await reader.read(4096):
                pass  # heartbeats until the close
        return True
    except ConnectionResetError:
        return True


def test_ha_connection_cap_and_silent_peer_housekeeping(tmp_path, caplog, driven_clock):
    """Housekeeping by ticks of the master's driven clock."""
    clock = driven_clock

    async def main():
        master = await BrokerNode.start(
            _config(tmp_path, "m", haMaxConnections=3, haHousekeepingInterval=600),
            "127.0.0.1",
            clock=clock,
        )
        writers = []
        try:
            held = []
            for _ in range(3):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", master.replication.ha.port
                )
                writer.write(wire.build_report(0))
                held.append(reader)
                writers.append(writer)
            await wait_for(
                lambda: len(master.replication.ha.connections) == 3, what="three connected"
            )
            refused = []
            for _ in range(10):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", master.replication.ha.port
                )
                refused.append(reader)
                writers.append(writer)
            for reader in refused:
                assert await _closed(reader, 5.0)
            assert (
                len(master.replication.ha.connections) == 3
                and master.replication.ha.refusals.total == 10
            )
            # the three that reported once and then fell silent go at the housekeeping tick
            await clock.advance(599)
            assert len(master.replication.ha.connections) == 3
            await clock.advance(1)
            for reader in held:
                assert await _closed(reader)
            await wait_for(lambda: not master.replication.ha.connections, what="all closed")
            # a peer that connects and says nothing at all is closed the same way
            reader, writer = await asyncio.open_connection("127.0.0.1", master.replication.ha.port)
            writers.append(writer)
            await wait_for(
                lambda: len(master.replication.ha.connections) == 1, what="silent peer accepted"
            )
            await clock.advance(600)
            assert await _closed(reader)
        finally:
            for w in writers:
                w.close()
            await stop(master)

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    refusals = [r for r in caplog.records if "HA refused" in r.getMessage()]
    assert len(refusals) == 1, "ten refusals from one host are logged once"
