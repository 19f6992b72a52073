"""The real processes of ``haproof chaos`` on 127.0.0.1: one controller, a name server and
nodes ``a``, ``b``, ``c`` of group ``broker-a`` (SYNC_MASTER, SYNC_FLUSH, controller mode,
``allAckInSyncStateSet=true``, archiving to ``{workdir}/archive``; started by
``tools/controller_group.py``), and the faults applied to them: kill -9 and restart,
SIGSTOP/SIGCONT, and a partition of a node from the controller made by black-holing its
``FaultProxy`` (no iptables).

Node ports stay the same across restarts, so an address names one node for the whole run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tools.controller_group import BROKER_TIMING, ControllerGroup

CLUSTER, BROKER_NAME = "C", "broker-a"
NODES = ("a", "b", "c")
TIMING = {**BROKER_TIMING, "haMaxTimeSlaveNotCatchup": 1500, "syncFlushTimeout": 3000}
PLANTED_BUG_ENV = "HAPROOF_PLANTED_BUG"


class RealGroup(ControllerGroup):
    """Build with ``await RealGroup.start(workdir, planted_bug=None)``; ``await close()``."""

    @property
    def archive(self) -> Path:
        return self.workdir / "archive"

    @property
    def ctl(self):
        return self.controllers[0]

    @classmethod
    async def start(cls, workdir: Path, planted_bug: str | None = None) -> RealGroup:
        workdir.mkdir(parents=True, exist_ok=True)
        env = {PLANTED_BUG_ENV: planted_bug} if planted_bug else {}
        me = cls(workdir, cluster=CLUSTER, broker_name=BROKER_NAME, env=env)
        try:
            await me._start_all()
        except BaseException:
            await me.close()
            raise
        return me

    async def _start_all(self) -> None:
        await self.start_controllers(1, names=["ctl"])
        await self.start_namesrv()
        for name in NODES:
            await self.add_node(name, proxied=True)
        for name in NODES:
            self.write_conf(name, self._props())
        await asyncio.gather(*(self.restart(name) for name in NODES))

    def _props(self) -> dict:
        return {
            "mappedFileSizeCommitLog": 1024 * 1024,
            "allAckInSyncStateSet": "true",
            "archiveEnable": "true",
            "archiveRoot": f"file://{self.archive}",
            "archiveInProcess": "true",
            "archiveIntervalMs": 300,
            **TIMING,
        }

    def store(self, name: str) -> Path:
        return self.nodes[name].store

    def addr(self, name: str) -> str:
        return self.nodes[name].addr

    def name_at(self, addr: str) -> str | None:
        node = self.node_at(addr)
        return node.name if node else None

    # -- faults ---------------------------------------------------------------------------------

    async def restart(self, name: str) -> None:
        """(Re)start node ``name``; returns once its port listens."""
        await self.start_node(name)

    def partition(self, name: str) -> None:
        """Cut node ``name`` off the controller: what it sends is read and discarded, and its
        open connections are reset (it sees them fail, then its reconnects hang)."""
        for proxy in self.nodes[name].to_controllers:
            proxy.blackhole(True)
            proxy.reset()

    def heal(self, name: str) -> None:
        for proxy in self.nodes[name].to_controllers:
            proxy.blackhole(False)

    # -- asking ---------------------------------------------------------------------------------

    async def replica_info(self) -> tuple[str | None, int]:
        """(master address, master epoch) as the controller says; (None, 0) when it does not
        answer."""
        addr, epoch, _ = await super().replica_info(self.ctl.addr)
        return addr, epoch

    async def stop_nodes(self) -> None:
        """SIGTERM every node (each flushes and persists), for the byte comparison."""
        for name in NODES:
            self.resume(name)
            if self.up(name):
                await asyncio.to_thread(self.nodes[name].proc.stop)
