"""An in-process controller (its processor, journal and housekeeping) on one DrivenClock, and
broker-side ControllerClients against it over fake role owners: what the controller client's
unit tests share (``test_client.py``, ``test_switch_preempt.py``,
``test_lease_silent_partition.py``; ``test_process.py`` runs the fakes against real controller
processes)."""

from __future__ import annotations

import json
from pathlib import Path

from broker.clock import Clock, DrivenClock
from broker.controller.config import ControllerConfig
from broker.controller.controller import Controller
from broker.controller.journal import Journal
from broker.controller.state_machine import ControllerStateMachine
from broker.ha.broker_identity import BrokerIdentityStore, Invoke
from broker.ha.controller_client import ClientConfig, ControllerClient
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError

CTL = "127.0.0.1:9878"


def in_process_controller(
    tmp_path: Path, clock: DrivenClock, scan_ms: int | None = None
) -> tuple[ControllerStateMachine, Journal, Controller]:
    """A controller at ``CTL`` journaling in ``tmp_path/ctl`` (opened: close it at the end);
    ``scan_ms``: its scans for inactive brokers and masters (None: the defaults)."""
    sm = ControllerStateMachine()
    journal = Journal(tmp_path / "ctl", sm)
    journal.open()
    scans = {}
    if scan_ms is not None:
        scans = {"scanNotActiveBrokerInterval": scan_ms, "scanInactiveMasterInterval": scan_ms}
    ctl = Controller(ControllerConfig(**scans), journal, sm, clock=clock, self_addr=CTL)
    return sm, journal, ctl


def fake_node_client(
    store_dir: Path, cfg: ClientConfig, invoke: Invoke, node: FakeNode, clock: Clock
) -> ControllerClient:
    """A ControllerClient over ``node`` (role owner and offsets) whose identity files live in
    ``store_dir`` (made here)."""
    store_dir.mkdir()
    identity = BrokerIdentityStore(store_dir, cfg.cluster, cfg.broker_name)
    return ControllerClient(cfg, identity, invoke, node, node, clock)


class FakeNode:
    """Role owner and offset reader of one broker."""

    def __init__(self, offset: int) -> None:
        self.epoch, self.offset, self.role, self.fenced_at = 0, offset, "NONE", None
        self.clock: DrivenClock | None = None

    def master_epoch(self) -> int:
        return self.epoch

    async def become_master(self, *, broker_id, master_epoch, sync_state_set, sync_state_set_epoch):
        self.role, self.epoch = "MASTER", master_epoch

    async def become_slave(self, *, broker_id, master_epoch, master_broker_id, master_addr):
        self.role, self.epoch = "SLAVE", master_epoch

    def fence_writes(self, reason: str) -> None:
        self.fenced_at = self.clock.monotonic_ms()

    def unfence_writes(self) -> None:
        self.fenced_at = None

    def max_offset(self) -> int:
        return self.offset

    def confirm_offset(self) -> int:
        return self.offset


class Net:
    def __init__(self, handlers: dict) -> None:
        self.handlers, self.cut, self.clients = handlers, set(), {}

    def invoke_for(self, who: str):
        conn = object()  # one channel per broker

        async def invoke(addr: str, req: RemotingCommand, timeout_ms: int) -> RemotingCommand:
            if who in self.cut:
                raise RemotingError(f"{who} -> {addr}: partitioned")
            return await self.handlers[req.code](conn, req)

        return invoke

    async def notify(self, addr: str, header: dict, body: dict) -> None:
        if addr in self.cut:
            raise RemotingError("partitioned")
        req = RemotingCommand.request(1008, header, json.dumps(body).encode())
        await self.clients[addr].on_notify(None, req)
