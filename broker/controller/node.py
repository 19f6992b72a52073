"""A controller process's parts, built once from its config: state machine, log (the journal
or the Raft group), the controller, its processor on a remoting server (its own, standalone; the
name server's, embedded), the role-change notifier and the housekeeping loop."""

from __future__ import annotations

import asyncio
import logging

from broker.clock import SYSTEM_CLOCK, Clock
from broker.controller.archiver import open_archiver
from broker.controller.config import ControllerConfig
from broker.controller.controller import Controller
from broker.controller.journal import Journal
from broker.controller.processor import ControllerProcessor
from broker.controller.state_machine import ControllerStateMachine
from broker.metrics.controller_metrics import ControllerMetrics
from broker.metrics.refusals import Refusals
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from broker.remoting.server import RemotingServer

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT_MS = 3_000
ARCHIVE_ON_STOP_S = 5.0


class ControllerNode:
    def __init__(self, config: ControllerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.sm = ControllerStateMachine()
        self.client = RemotingClient()
        if config.controllerType == "jRaft":
            from broker.controller.raft import RaftLog  # PySyncObj only where a group runs

            self.log = RaftLog(config, self.sm)
        else:
            self.log = Journal(
                config.controllerStorePath, self.sm, snapshot_every=config.snapshotEveryEvents
            )
        self_addr = f"{config.listenHost}:{config.listenPort}"
        if config.controllerType == "jRaft":
            self_addr = config.rpc_addr_of(config.jRaftServerId) or self_addr
        self.controller = Controller(
            config, self.log, self.sm, clock=clock, notifier=self._notify, self_addr=self_addr
        )
        self.processor = ControllerProcessor(self.controller)
        self.refusals = Refusals()  # refused requests by reason (the metrics)
        self.archiver = open_archiver(config, self.sm, self.log, clock)  # archiveEnable
        self.server: RemotingServer | None = None
        self._own_server = False

    async def start(self, server: RemotingServer | None = None) -> ControllerNode:
        """Open the log (replay) and serve on ``server`` (the name server's), or on a server
        of its own at listenHost:listenPort."""
        replayed = self.log.open()
        log.info(
            "controller: %s log open, %d events replayed, %d broker sets",
            self.config.controllerType,
            replayed,
            len(self.sm.tables.replicas),
        )
        if server is None:
            server = RemotingServer()
            for code, handler in self.refusals.counted(self.processor.handlers()).items():
                server.register(code, handler)
            await server.start(self.config.listenHost, self.config.listenPort)
            self._own_server = True
        else:
            for code, handler in self.refusals.counted(self.processor.handlers()).items():
                server.register(code, handler)
        self.server = server
        self.controller.housekeeping.start()
        if self.archiver is not None:
            self.archiver.start()
        return self

    async def _notify(self, addr: str, header: dict, body: dict) -> None:
        import json

        req = RemotingCommand.request(
            RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, json.dumps(body).encode(), oneway=True
        )
        await self.client.invoke_oneway(addr, req)

    def metrics_snapshot(self, node_id: str):
        """Its Prometheus families, for the endpoint of the process it runs in."""
        return ControllerMetrics(self.controller, self.refusals, node_id).snapshot

    async def stop(self) -> None:
        await self.controller.housekeeping.stop()
        if self.archiver is not None:
            await self.archiver.stop()
            if self.log.is_leader():
                try:  # what the last round did not ship yet, bounded: a stop never hangs
                    await asyncio.wait_for(self.archiver.ship(), ARCHIVE_ON_STOP_S)
                except Exception as exc:  # noqa: BLE001 - the restart ships it again
                    log.warning("controller archiver: last records not shipped: %s", exc)
        for task in list(self.controller.housekeeping_tasks):
            task.cancel()
        if self._own_server and self.server is not None:
            await self.server.stop()
        await self.client.close()
        self.log.close()
