"""A broker group in controller mode as real processes on 127.0.0.1: one controller or more
(a Raft group: the caller gives its keys), a name server, and SYNC_MASTER nodes with
``enableControllerMode=true`` (the controller decides who is master). The one owner of such a
group's ports, confs, processes and the controllers' view of the master; ``haproof chaos``,
``haproof bench failover`` and the process tests add only what is their own.

A node keeps its ports across restarts, so an address names one node for the whole run. With
``proxied=True`` a node reaches each controller through a ``FaultProxy`` of its own
(``node.to_controllers``), so it can be cut off the controllers while others still reach it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tools.faultproxy import FaultProxy
from tools.localcluster import (
    LocalProcess,
    free_port,
    start_controller,
    start_namesrv,
    write_broker_conf,
)

# a failover in about 3 s: heartbeats every 300 ms, dead after 3 s, lease 2 s (<= 80 %)
BROKER_TIMING = {
    "brokerHeartbeatInterval": 300,
    "controllerHeartBeatTimeoutMills": 3000,
    "controllerLeaseMills": 2000,
    "syncBrokerMetadataPeriod": 500,
    "haSendHeartbeatInterval": 300,
    "slaveSyncIntervalMs": 300,
}
SCAN_MS = 200  # the controllers' scanNotActiveBrokerInterval / scanInactiveMasterInterval


@dataclass
class Node:
    name: str
    port: int
    conf: Path
    proc: LocalProcess | None = None
    to_controllers: list[FaultProxy] = field(default_factory=list)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def store(self) -> Path:
        return self.conf.parent / f"store-{self.name}"


class ControllerGroup:
    """The processes of one group; ``close()`` ends them all (kill -9)."""

    def __init__(
        self,
        workdir: Path,
        *,
        cluster: str,
        broker_name: str,
        env: dict[str, str] | None = None,
        log_level: str = "INFO",
        module: str = "broker.cli",
    ) -> None:
        self.workdir, self.cluster, self.broker_name = workdir, cluster, broker_name
        self.env, self.log_level, self.module = env or {}, log_level, module
        self.controllers: list[LocalProcess] = []
        self.ctl_addrs: list[str] = []
        self.ns: LocalProcess | None = None
        self.nodes: dict[str, Node] = {}
        self.stopped: set[str] = set()
        self.client = RemotingClient()

    # -- starting -------------------------------------------------------------------------------

    async def start_controllers(
        self, count: int, keys=lambda addrs, i: {}, names: list[str] | None = None
    ) -> None:
        """``count`` controllers (``ctl0``... or ``names``; store and log by name), started
        together; ``keys(addrs, i)`` adds ControllerConfig keys to controller ``i`` (a Raft
        group's)."""
        names = names or [f"ctl{i}" for i in range(count)]
        ports = [free_port() for _ in range(count)]
        self.ctl_addrs = [f"127.0.0.1:{p}" for p in ports]
        scan = {"scanNotActiveBrokerInterval": SCAN_MS, "scanInactiveMasterInterval": SCAN_MS}

        def one(i: int, name: str, port: int) -> LocalProcess:
            props = {**scan, **keys(self.ctl_addrs, i)}
            return start_controller(self.workdir, props, self.env, self.log_level, name, port)

        procs = await asyncio.gather(
            *(asyncio.to_thread(one, i, *np) for i, np in enumerate(zip(names, ports, strict=True)))
        )
        self.controllers = list(procs)

    async def start_namesrv(self) -> None:
        self.ns = await asyncio.to_thread(start_namesrv, self.workdir, log_level=self.log_level)

    async def add_node(self, name: str, proxied: bool = False) -> Node:
        """Node ``name`` (no process yet); ``proxied``: its FaultProxies to the controllers."""
        node = Node(name, 0, self.workdir / f"{name}.conf")
        for addr in self.ctl_addrs if proxied else ():
            host, _, port = addr.rpartition(":")
            node.to_controllers.append(await FaultProxy.start(host, int(port)))
        self.nodes[name] = node
        return node

    def write_conf(self, name: str, props: dict) -> None:
        """Node ``name``'s broker.conf on fresh ports: brokerId 0, SYNC_MASTER, SYNC_FLUSH,
        controller mode; ``props`` add or override keys."""
        node = self.nodes[name]
        node.port = free_port()
        ctl = [f"127.0.0.1:{p.port}" for p in node.to_controllers] or self.ctl_addrs
        props = {
            "brokerClusterName": self.cluster,
            "brokerName": self.broker_name,
            "brokerId": 0,
            "brokerRole": "SYNC_MASTER",
            "flushDiskType": "SYNC_FLUSH",
            "storePathRootDir": node.store,
            "listenPort": node.port,
            "haListenPort": free_port(),
            "namesrvAddr": self.ns.addr,
            "nodeName": name,
            "enableControllerMode": "true",
            "controllerAddr": ";".join(ctl),
            **props,
        }
        write_broker_conf(node.conf, props)

    def node_args(self, name: str) -> list[str]:
        conf = str(self.nodes[name].conf)
        return ["--log-level", self.log_level, "broker", "-c", conf, "--host", "127.0.0.1"]

    def launch(self, name: str) -> LocalProcess:
        """(Re)start node ``name`` on its ports; blocking until its port listens."""
        node = self.nodes[name]
        log = self.workdir / f"{name}.log"
        args = self.node_args(name)
        node.proc = LocalProcess.start(name, args, node.port, log, self.env, 60.0, self.module)
        self.stopped.discard(name)
        return node.proc

    async def start_node(self, name: str) -> LocalProcess:
        """(Re)start node ``name``; returns once its port listens."""
        return await asyncio.to_thread(self.launch, name)

    # -- faults ---------------------------------------------------------------------------------

    def up(self, name: str) -> bool:
        proc = self.nodes[name].proc
        return proc is not None and proc.alive()

    def kill(self, name: str) -> None:
        """kill -9 node ``name`` (a stopped one dies too)."""
        proc = self.nodes[name].proc
        if proc is not None:
            proc.kill()
        self.stopped.discard(name)

    def pause(self, name: str) -> None:
        """SIGSTOP: the process is frozen, its sockets stay open."""
        if self.up(name):
            os.kill(self.nodes[name].proc.proc.pid, signal.SIGSTOP)
            self.stopped.add(name)

    def resume(self, name: str) -> None:
        if name in self.stopped and self.up(name):
            os.kill(self.nodes[name].proc.proc.pid, signal.SIGCONT)
        self.stopped.discard(name)

    def node_at(self, addr: str) -> Node | None:
        return next((n for n in self.nodes.values() if n.port and n.addr == addr), None)

    # -- asking ---------------------------------------------------------------------------------

    async def invoke(self, addr: str, code: int, fields: dict | None = None, timeout_ms=2000):
        """One request; None when ``addr`` does not answer."""
        try:
            return await self.client.invoke(
                addr, RemotingCommand.request(code, fields or {}), timeout_ms
            )
        except Exception:  # noqa: BLE001 - down, stopped or not up yet
            return None

    async def controller_leader(self, among: list[str] | None = None) -> str | None:
        for addr in among or self.ctl_addrs:
            resp = await self.invoke(addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
            if resp is not None and resp.ext_fields.get("isLeader") == "true":
                return addr
        return None

    async def replica_info(self, ctl: str | None = None) -> tuple[str | None, int, dict]:
        """(master address, master epoch, the SyncStateSet body) as controller ``ctl`` (by
        default the only one, or the leader of several) says; (None, 0, {}) when none
        answers."""
        if ctl is None:
            one = len(self.ctl_addrs) == 1
            ctl = self.ctl_addrs[0] if one else await self.controller_leader()
        if ctl is None:
            return None, 0, {}
        return await replica_info_of(self.client, ctl, self.broker_name)

    async def status(self, addr: str) -> dict | None:
        """A node's GET_BROKER_HA_STATUS (role, epoch, maxOffset, confirmOffset, slaves)."""
        resp = await self.invoke(addr, RequestCode.GET_BROKER_HA_STATUS)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return None
        return json.loads(resp.body)

    async def in_sync_slaves(self, addr: str) -> int:
        doc = await self.status(addr) or {}
        return sum(1 for s in doc.get("slaves", []) if s.get("inSync"))

    async def close(self) -> None:
        """kill -9 everything (a stopped node is continued first), the proxies, the client."""
        for name, node in self.nodes.items():
            if self.up(name):
                node.proc.proc.send_signal(signal.SIGCONT)
            if node.proc is not None:
                node.proc.kill()
            for proxy in node.to_controllers:
                await proxy.stop()
        for proc in (*self.controllers, self.ns):
            if proc is not None:
                proc.kill()
        await self.client.close()


async def replica_info_of(
    client: RemotingClient, controller: str, broker_name: str
) -> tuple[str | None, int, dict]:
    """The controller's (master address, masterEpoch, SyncStateSet body) of ``broker_name``
    (CONTROLLER_GET_REPLICA_INFO, 1004); (None, 0, {}) when it does not answer."""
    req = RemotingCommand.request(
        RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": broker_name}
    )
    try:
        resp = await client.invoke(controller, req, 2000)
    except Exception:  # noqa: BLE001 - down, stopped or not up yet
        return None, 0, {}
    if resp.code != ResponseCode.SUCCESS:
        return None, 0, {}
    h = resp.ext_fields
    body = json.loads(resp.body) if resp.body else {}
    return h.get("masterAddress") or None, int(h.get("masterEpoch") or 0), body
