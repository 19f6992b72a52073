"""The real processes of ``haproof chaos`` on 127.0.0.1: one controller, a name server and
nodes ``a``, ``b``, ``c`` of group ``broker-a`` (SYNC_MASTER, SYNC_FLUSH, controller mode,
``allAckInSyncStateSet=true``, archiving to ``{workdir}/archive``), and the faults applied to
them: kill -9 and restart, SIGSTOP/SIGCONT, and a partition of a node from the controller made
by black-holing its ``FaultProxy`` (no iptables).

Node ports stay the same across restarts, so an address names one node for the whole run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tools.faultproxy import FaultProxy
from tools.localcluster import (
    LocalProcess,
    free_port,
    start_broker,
    start_namesrv,
    write_broker_conf,
)

CLUSTER, BROKER_NAME = "C", "broker-a"
NODES = ("a", "b", "c")
# a failover in about 3 s: heartbeats every 300 ms, dead after 3 s, lease 2 s (<= 80 %)
TIMING = {
    "brokerHeartbeatInterval": 300,
    "controllerHeartBeatTimeoutMills": 3000,
    "controllerLeaseMills": 2000,
    "syncBrokerMetadataPeriod": 500,
    "haSendHeartbeatInterval": 300,
    "slaveSyncIntervalMs": 300,
    "haMaxTimeSlaveNotCatchup": 1500,
    "syncFlushTimeout": 3000,
}
PLANTED_BUG_ENV = "HAPROOF_PLANTED_BUG"


class RealGroup:
    """Build with ``await RealGroup.start(workdir, planted_bug=None)``; ``await close()``."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir, self.env = workdir, env
        self.ctl: LocalProcess | None = None
        self.ns: LocalProcess | None = None
        self.procs: dict[str, LocalProcess | None] = dict.fromkeys(NODES)
        self.ports: dict[str, int] = {}
        self.confs: dict[str, Path] = {}
        self.proxies: dict[str, FaultProxy] = {}
        self.stopped: set[str] = set()
        self.client = RemotingClient()

    @property
    def archive(self) -> Path:
        return self.workdir / "archive"

    @classmethod
    async def start(cls, workdir: Path, planted_bug: str | None = None) -> RealGroup:
        workdir.mkdir(parents=True, exist_ok=True)
        env = {PLANTED_BUG_ENV: planted_bug} if planted_bug else {}
        me = cls(workdir, env)
        try:
            await me._start_all()
        except BaseException:
            await me.close()
            raise
        return me

    async def _start_all(self) -> None:
        ctl_port = free_port()
        conf = self.workdir / "controller.conf"
        conf.write_text(
            f"listenPort={ctl_port}\ncontrollerStorePath={self.workdir / 'ctl'}\n"
            "scanNotActiveBrokerInterval=200\nscanInactiveMasterInterval=200\n"
        )
        args = ["controller", "-c", str(conf)]
        self.ctl = await asyncio.to_thread(
            LocalProcess.start, "ctl", args, ctl_port, self.workdir / "ctl.log", self.env
        )
        self.ns = await asyncio.to_thread(start_namesrv, self.workdir)
        for name in NODES:
            self.proxies[name] = await FaultProxy.start("127.0.0.1", ctl_port)
        for name in NODES:
            self._write_conf(name)
        await asyncio.gather(*(self.restart(name) for name in NODES))

    def _write_conf(self, name: str) -> None:
        self.ports[name] = port = free_port()
        props = {
            "brokerClusterName": CLUSTER,
            "brokerName": BROKER_NAME,
            "brokerId": 0,
            "brokerRole": "SYNC_MASTER",
            "flushDiskType": "SYNC_FLUSH",
            "storePathRootDir": self.store(name),
            "listenPort": port,
            "haListenPort": free_port(),
            "namesrvAddr": self.ns.addr,
            "nodeName": name,
            "mappedFileSizeCommitLog": 1024 * 1024,
            "enableControllerMode": "true",
            "controllerAddr": f"127.0.0.1:{self.proxies[name].port}",
            "allAckInSyncStateSet": "true",
            "archiveEnable": "true",
            "archiveRoot": f"file://{self.archive}",
            "archiveInProcess": "true",
            "archiveIntervalMs": 300,
            **TIMING,
        }
        self.confs[name] = write_broker_conf(self.workdir / f"{name}.conf", props)

    def store(self, name: str) -> Path:
        return self.workdir / f"store-{name}"

    def addr(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def name_at(self, addr: str) -> str | None:
        return next((n for n in NODES if self.ports.get(n) and self.addr(n) == addr), None)

    def up(self, name: str) -> bool:
        proc = self.procs[name]
        return proc is not None and proc.alive()

    # -- faults ---------------------------------------------------------------------------------

    async def restart(self, name: str) -> None:
        """(Re)start node ``name``; returns once its port listens."""
        self.procs[name] = await asyncio.to_thread(
            start_broker, name, self.confs[name], self.ports[name], self.workdir, self.env
        )

    def kill(self, name: str) -> None:
        """kill -9 (a stopped process dies too)."""
        proc = self.procs[name]
        if proc is not None:
            proc.kill()
        self.stopped.discard(name)

    def pause(self, name: str) -> None:
        """SIGSTOP: the process is frozen, its sockets stay open."""
        if self.up(name):
            os.kill(self.procs[name].proc.pid, signal.SIGSTOP)
            self.stopped.add(name)

    def resume(self, name: str) -> None:
        if name in self.stopped and self.up(name):
            os.kill(self.procs[name].proc.pid, signal.SIGCONT)
        self.stopped.discard(name)

    def partition(self, name: str) -> None:
        """Cut node ``name`` off the controller: what it sends is read and discarded, and its
        open connections are reset (it sees them fail, then its reconnects hang)."""
        self.proxies[name].blackhole(True)
        self.proxies[name].reset()

    def heal(self, name: str) -> None:
        self.proxies[name].blackhole(False)

    # -- asking ---------------------------------------------------------------------------------

    async def invoke(self, addr: str, code: int, fields: dict | None = None, timeout_ms=2000):
        """One request; None when ``addr`` does not answer."""
        try:
            return await self.client.invoke(
                addr, RemotingCommand.request(code, fields or {}), timeout_ms
            )
        except Exception:  # noqa: BLE001 - down, stopped or not up yet
            return None

    async def replica_info(self) -> tuple[str | None, int]:
        """(master address, master epoch) as the controller says; (None, 0) when it does not
        answer."""
        fields = {"brokerName": BROKER_NAME}
        resp = await self.invoke(self.ctl.addr, RequestCode.CONTROLLER_GET_REPLICA_INFO, fields)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return None, 0
        h = resp.ext_fields
        return h.get("masterAddress") or None, int(h.get("masterEpoch") or 0)

    async def status(self, addr: str) -> dict | None:
        """A node's GET_BROKER_HA_STATUS (role, epoch, maxOffset, confirmOffset, slaves)."""
        resp = await self.invoke(addr, RequestCode.GET_BROKER_HA_STATUS)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return None
        return json.loads(resp.body)

    async def close(self) -> None:
        for name in NODES:
            self.resume(name)
            if self.procs[name] is not None:
                self.procs[name].kill()
        for proxy in self.proxies.values():
            await proxy.stop()
        for proc in (self.ns, self.ctl):
            if proc is not None:
                proc.kill()
        await self.client.close()

    async def stop_nodes(self) -> None:
        """SIGTERM every node (each flushes and persists), for the byte comparison."""
        for name in NODES:
            self.resume(name)
            if self.up(name):
                await asyncio.to_thread(self.procs[name].stop)
