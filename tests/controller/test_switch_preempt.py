"""A slave's role switch toward a master that hangs (it never answers the reconcile's request)
must not keep the node from the newer master the controller elects: the newer epoch preempts
the switch in flight, which never gets to cut its log against the old master, and the node's
heartbeats go on meanwhile. With no newer master, the switch ends at its bound and is tried
again. One DrivenClock; an in-process controller (its processor, journal and housekeeping)."""

from __future__ import annotations

import asyncio

from broker.clock import DrivenClock
from broker.controller.processor import ControllerProcessor
from broker.ha.controller_client import ClientConfig
from tests.controller.inproc import CTL, FakeNode, Net, fake_node_client, in_process_controller

A, B, C = (f"127.0.0.1:{10910 + i}" for i in (1, 2, 3))


class HangingPeerNode(FakeNode):
    """A role owner whose reconcile against ``hung`` never gets an answer (SIGSTOP)."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.hung: str | None = None
        self.attempts: list[str] = []  # masters a slave switch began toward
        self.cancelled, self.cut_against = 0, []

    async def become_slave(self, *, broker_id, master_epoch, master_broker_id, master_addr):
        self.attempts.append(master_addr)
        if master_addr == self.hung:
            try:
                await asyncio.Future()  # the request to the hung master: no answer, ever
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            self.cut_against.append(master_addr)  # never reached: no cut after a cancel
        await super().become_slave(
            broker_id=broker_id,
            master_epoch=master_epoch,
            master_broker_id=master_broker_id,
            master_addr=master_addr,
        )
        self.master = master_addr


def _group(tmp_path, clock: DrivenClock, timeout_ms: int = 2000):
    sm, journal, ctl = in_process_controller(tmp_path, clock, scan_ms=200)
    net = Net(ControllerProcessor(ctl).handlers())
    ctl.notifier = net.notify
    nodes, clients = {}, {}
    for i, (addr, offset) in enumerate(((A, 300), (B, 200), (C, 100)), start=1):
        nodes[addr] = HangingPeerNode(offset)
        nodes[addr].clock = clock
        cc = ClientConfig(
            "DefaultCluster",
            "broker-a",
            addr,
            (CTL,),
            heartbeat_interval_ms=300,
            heartbeat_timeout_ms=timeout_ms,
            lease_ms=int(timeout_ms * 0.75),
            sync_metadata_period_ms=500,
            switch_timeout_ms=4000,
        )
        clients[addr] = fake_node_client(
            tmp_path / f"b{i}", cc, net.invoke_for(addr), nodes[addr], clock
        )
    net.clients = clients
    return sm, journal, ctl, net, nodes, clients


async def _wait(clock: DrivenClock, cond, within_ms: float, step_ms: float = 50) -> float:
    """Drive the clock until ``cond()``; the driven time it took."""
    start = clock.monotonic_ms()
    while not cond():
        assert clock.monotonic_ms() - start <= within_ms, "condition not met in time"
        await clock.advance(step_ms)
    return clock.monotonic_ms() - start


def test_a_newer_master_preempts_a_switch_toward_a_hung_master(tmp_path):
    async def go():
        clock = DrivenClock()
        sm, journal, ctl, net, nodes, clients = _group(tmp_path, clock)
        nodes[C].hung = A  # C was restarted: its first switch (follow A) meets A hung
        ctl.housekeeping.start()
        for addr in (A, B):
            clients[addr].start()
            await clock.advance(100)
        await _wait(clock, lambda: nodes[A].role == "MASTER" and nodes[B].role == "SLAVE", 5000)
        assert await clients[A].alter_sync_state_set({1, 2})
        clients[C].start()
        await _wait(clock, lambda: nodes[C].attempts == [A], 3000)  # in flight, hanging
        net.cut.add(A)  # A goes silent (SIGSTOP)
        beats_before = clients[C].rounds
        took = await _wait(
            clock, lambda: sm.tables.sync_states["broker-a"].masterBrokerId == 2, 5000
        )
        assert took <= 2600  # the heartbeat timeout plus a scan or two
        assert clients[C].rounds > beats_before + 3  # C heartbeats while its switch hangs
        # the newer master preempts C's switch: it follows B within a pull or two
        followed_in = await _wait(clock, lambda: getattr(nodes[C], "master", None) == B, 1500)
        assert nodes[C].role == "SLAVE" and nodes[C].epoch == nodes[B].epoch == 2
        assert nodes[C].cancelled == 1 and nodes[C].cut_against == []
        assert clients[C]._switching.preempted == 1
        assert clients[C].replica.master_epoch == 2 and clients[C].replica.master_addr == B
        for c in clients.values():
            await c.stop()
        await ctl.housekeeping.stop()
        journal.close()
        return followed_in

    followed_in = asyncio.run(go())
    print(f"followed the newer master {followed_in:.0f} ms after its election")


def test_a_switch_toward_a_hung_master_ends_at_its_bound_and_is_tried_again(tmp_path):
    async def go():
        clock = DrivenClock()
        sm, journal, ctl, net, nodes, clients = _group(tmp_path, clock, timeout_ms=2000)
        nodes[B].hung = A  # A's broker port hangs, its controller client still beats
        ctl.housekeeping.start()
        for addr in (A, B):
            clients[addr].start()
            await clock.advance(100)
        await _wait(clock, lambda: nodes[B].attempts == [A], 5000)
        began = clock.monotonic_ms()
        assert clients[B].replica.master_addr == A  # the switch in flight names its target
        await _wait(clock, lambda: len(nodes[B].attempts) >= 2, 5000)
        assert 4000 <= clock.monotonic_ms() - began <= 4600  # the bound
        assert clients[B]._switching.timed_out >= 1 and nodes[B].cut_against == []
        nodes[B].hung = None  # A answers again: the retried switch completes
        await _wait(clock, lambda: getattr(nodes[B], "master", None) == A, 5000)
        assert nodes[B].role == "SLAVE"
        for c in clients.values():
            await c.stop()
        await ctl.housekeeping.stop()
        journal.close()

    asyncio.run(go())
