"""The master lease under a partition that drops packets: every request to the controller hangs
until its timeout instead of failing at once. The lease must still end on time, before the
controller may elect another master, with the defaults and with the fast settings
``haproof bench failover`` measures (docs/controller.md, "Fast failover")."""

from __future__ import annotations

import asyncio

import pytest

from broker.clock import DrivenClock
from broker.controller.processor import ControllerProcessor
from broker.ha.controller_client import ClientConfig
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError
from tests.controller.inproc import CTL, FakeNode, fake_node_client, in_process_controller


class SilentNet:
    """A cut broker's requests wait their whole timeout on the clock, then fail."""

    def __init__(self, handlers: dict, clock: DrivenClock) -> None:
        self.handlers, self.clock, self.cut = handlers, clock, set()

    def invoke_for(self, who: str):
        conn = object()

        async def invoke(addr: str, req: RemotingCommand, timeout_ms: int) -> RemotingCommand:
            if who in self.cut:
                await self.clock.sleep_ms(timeout_ms)
                raise RemotingError(f"{who} -> {addr}: timed out after {timeout_ms} ms")
            return await self.handlers[req.code](conn, req)

        return invoke


@pytest.mark.parametrize(
    ("interval_ms", "timeout_ms", "lease_ms", "scan_ms"),
    [(1000, 10_000, 8000, 500), (300, 2000, 1500, 200)],
    ids=["defaults", "fast"],
)
def test_a_silent_partition_fences_the_master_before_the_controller_elects(
    tmp_path, interval_ms, timeout_ms, lease_ms, scan_ms
):
    async def go():
        clock = DrivenClock()
        sm, journal, ctl = in_process_controller(tmp_path, clock, scan_ms=scan_ms)
        net = SilentNet(ControllerProcessor(ctl).handlers(), clock)
        nodes, clients = {}, {}
        for i in (1, 2):
            addr = f"127.0.0.1:{10910 + i}"
            nodes[addr] = FakeNode(100 * i)
            nodes[addr].clock = clock
            cc = ClientConfig(
                "DefaultCluster",
                "broker-a",
                addr,
                (CTL,),
                heartbeat_interval_ms=interval_ms,
                heartbeat_timeout_ms=timeout_ms,
                lease_ms=lease_ms,
                sync_metadata_period_ms=500,
            )
            clients[addr] = fake_node_client(
                tmp_path / f"b{i}", cc, net.invoke_for(addr), nodes[addr], clock
            )
        ctl.housekeeping.start()
        for c in clients.values():
            c.start()
            await clock.advance(100)
        await clock.advance(3000)
        master = next(a for a, n in nodes.items() if n.role == "MASTER")
        assert await clients[master].alter_sync_state_set({1, 2})
        await clock.advance(interval_ms)  # a heartbeat after the set grew
        net.cut.add(master)
        cut_at, elected_at = clock.monotonic_ms(), None
        for _ in range(1000):
            await clock.advance(20)
            if sm.tables.sync_states["broker-a"].masterBrokerId != clients[master].broker_id:
                elected_at = clock.monotonic_ms()
                break
        fenced_at = nodes[master].fenced_at
        for c in clients.values():  # the cut one's round waits on the clock: keep it moving
            stopping = asyncio.create_task(c.stop())
            while not stopping.done():
                await clock.advance(500)
            await stopping
        await ctl.housekeeping.stop()
        journal.close()
        assert elected_at is not None, "the controller never elected another master"
        assert fenced_at is not None and fenced_at < elected_at, (
            fenced_at and fenced_at - cut_at,
            elected_at - cut_at,
        )
        # the fence comes within a beat of the lease's end, whatever the requests wait
        assert fenced_at - cut_at <= lease_ms + 200

    asyncio.run(go())
