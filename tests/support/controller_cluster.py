"""A broker group in controller mode as real processes on 127.0.0.1, for the process tests of
issue #30: one controller (its journal) or three (PySyncObj's Raft), a name server, and nodes
``a``, ``b``, ``c`` (SYNC_MASTER, SYNC_FLUSH, ``enableControllerMode=true``; the controller
decides who is master).

Each node reaches each controller through a ``FaultProxy`` of its own in the test's event loop
(``node.to_controllers``, its ``controllerAddr``), so a test can cut one node off the
controllers while clients and peers still reach it; the test talks to the controllers directly.
The nodes run under ``tests/support/hooked_broker.py``: ``silence_ha`` makes a master's HA
links go silent, ``start_node(crash_at=...)`` crashes a rejoin cut.

    cluster = await ControllerCluster.start(tmp_path)   # one controller, nodes a b c
    master, epoch = await cluster.wait_master()
    ...
    await cluster.close()
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from broker.controller.events import ElectMasterEvent, decode_event
from broker.controller.journal import read_records
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.reader import decode_record
from tests.controller.support import Proc, raft_keys, start_controller
from tests.support.cluster import node_conf
from tests.support.waiting import wait_for
from tools.faultproxy import FaultProxy
from tools.localcluster import LocalProcess, free_port, start_namesrv

BROKER_NAME = "broker-a"
HOOKED = "tests.support.hooked_broker"
# a failover in about 3 s: heartbeats every 300 ms, dead after 3 s, lease 2 s (<= 80 %)
BROKER_TIMING = {
    "brokerHeartbeatInterval": 300,
    "controllerHeartBeatTimeoutMills": 3000,
    "controllerLeaseMills": 2000,
    "syncBrokerMetadataPeriod": 500,
    "haSendHeartbeatInterval": 300,
    "slaveSyncIntervalMs": 300,
}


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


class ControllerCluster:
    def __init__(self, tmp: Path, controllers: list[Proc], ctl_addrs: list[str], ns) -> None:
        self.tmp, self.controllers, self.ctl_addrs, self.ns = tmp, controllers, ctl_addrs, ns
        self.nodes: dict[str, Node] = {}
        self.client = RemotingClient()

    @classmethod
    async def start(
        cls,
        tmp: Path,
        *,
        controllers: int = 1,
        nodes=("a", "b", "c"),
        ctl_keys: str = "",
        per_node: dict[str, dict] | None = None,
        **extra,
    ) -> ControllerCluster:
        """Start everything: ``controllers`` controllers (more than one: a Raft group; each
        with ``ctl_keys`` added to its conf), a name server and one SYNC_MASTER node in
        controller mode per name in ``nodes``; ``extra`` adds or overrides broker.conf
        properties of every node, ``per_node`` those of one."""
        ctl_ports = [free_port() for _ in range(controllers)]
        ctl_addrs = [f"127.0.0.1:{p}" for p in ctl_ports]
        raft = [f"127.0.0.1:{free_port()}" for _ in ctl_ports] if controllers > 1 else []
        procs = [
            start_controller(
                tmp, f"ctl{i}", port, ctl_keys + raft_keys(ctl_addrs, raft, i), scripted=False
            )
            for i, port in enumerate(ctl_ports)
        ]
        me = cls(tmp, procs, ctl_addrs, await asyncio.to_thread(start_namesrv, tmp))
        try:
            for name in nodes:
                await me._add_node(name)
            for name in nodes:  # ports picked just before each start: others grab free ones
                me._write_conf(name, {**extra, **(per_node or {}).get(name, {})})
                await me.start_node(name)
        except BaseException:
            await me.close()
            raise
        return me

    async def _add_node(self, name: str) -> None:
        node = Node(name, 0, self.tmp / f"{name}.conf")
        for addr in self.ctl_addrs:
            host, _, ctl_port = addr.rpartition(":")
            node.to_controllers.append(await FaultProxy.start(host, int(ctl_port)))
        self.nodes[name] = node

    def _write_conf(self, name: str, extra: dict) -> None:
        node = self.nodes[name]
        node.port, ha_port = free_port(), free_port()
        ctl = ";".join(f"127.0.0.1:{p.port}" for p in node.to_controllers)
        props = {
            "flushDiskType": "SYNC_FLUSH",
            "enableControllerMode": "true",
            "controllerAddr": ctl,
            **BROKER_TIMING,
            **extra,
        }
        node_conf(self.tmp, name, 0, "SYNC_MASTER", node.port, ha_port, self.ns.addr, **props)

    def _args(self, name: str) -> list[str]:
        conf = str(self.nodes[name].conf)
        return ["--log-level", "INFO", "broker", "-c", conf, "--host", "127.0.0.1"]

    async def start_node(self, name: str) -> LocalProcess:
        """(Re)start node ``name``; returns once its port listens."""
        node, log = self.nodes[name], self.tmp / f"{name}.log"
        node.proc = await asyncio.to_thread(
            LocalProcess.start, name, self._args(name), node.port, log, None, 60.0, HOOKED
        )
        return node.proc

    async def run_until_crash(self, name: str, step: str, timeout_s: float = 60) -> int:
        """Start node ``name`` so that it exits (9) right after step ``step`` of its rejoin
        cut; its exit code once it ended."""
        with open(self.tmp / f"{name}.log", "ab") as log:
            argv = [sys.executable, "-m", HOOKED, "--crash-at", step, *self._args(name)]
            done = await asyncio.to_thread(
                subprocess.run, argv, stdout=log, stderr=log, timeout=timeout_s
            )
        return done.returncode

    def silence_ha(self, name: str) -> None:
        """Node ``name`` (a master) sends nothing more to its slaves (their links stay open)."""
        os.kill(self.nodes[name].proc.proc.pid, signal.SIGUSR1)

    def kill(self, name: str) -> None:
        """kill -9 node ``name``."""
        self.nodes[name].proc.kill()

    def node_at(self, addr: str) -> Node:
        return next(n for n in self.nodes.values() if n.addr == addr)

    # -- asking ---------------------------------------------------------------------------------

    async def invoke(self, addr: str, code: int, fields: dict | None = None, timeout_ms=2000):
        """One request; None when ``addr`` does not answer."""
        try:
            return await self.client.invoke(
                addr, RemotingCommand.request(code, fields or {}), timeout_ms
            )
        except Exception:  # noqa: BLE001 - down, or not up yet
            return None

    async def controller_leader(self, among: list[str] | None = None) -> str | None:
        for addr in among or self.ctl_addrs:
            resp = await self.invoke(addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
            if resp is not None and resp.ext_fields.get("isLeader") == "true":
                return addr
        return None

    async def replica_info(self, ctl: str | None = None) -> tuple[str | None, int, dict]:
        """(master address, master epoch, the SyncStateSet body) as the controller leader
        (or ``ctl``) says; (None, 0, {}) when none answers."""
        ctl = ctl or await self.controller_leader()
        if ctl is None:
            return None, 0, {}
        fields = {"brokerName": BROKER_NAME}
        resp = await self.invoke(ctl, RequestCode.CONTROLLER_GET_REPLICA_INFO, fields)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return None, 0, {}
        h = resp.ext_fields
        body = json.loads(resp.body) if resp.body else {}
        return h.get("masterAddress") or None, int(h.get("masterEpoch") or 0), body

    async def wait_master(self, after_epoch: int = 0, timeout_ms: int = 60_000):
        """(address, epoch) of the first master the controller names above ``after_epoch``."""

        async def elected():
            addr, epoch, _ = await self.replica_info()
            return (addr, epoch) if addr and epoch > after_epoch else None

        return await wait_for(elected, timeout_ms, what=f"a master above epoch {after_epoch}")

    async def status(self, addr: str) -> dict | None:
        """A node's GET_BROKER_HA_STATUS (role, epoch, maxOffset, slaves), or None."""
        resp = await self.invoke(addr, RequestCode.GET_BROKER_HA_STATUS)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return None
        return json.loads(resp.body)

    async def wait_in_sync(self, master: str, slaves: int, timeout_ms: int = 60_000) -> None:
        async def enough() -> bool:
            doc = await self.status(master) or {}
            return sum(1 for s in doc.get("slaves", []) if s.get("inSync")) >= slaves

        await wait_for(enough, timeout_ms, what=f"{slaves} slaves in sync with {master}")

    async def pull(self, addr: str, topic: str, queue_id: int, offset: int):
        """The record at ``offset`` of queue ``queue_id`` on node ``addr``."""
        req = RemotingCommand.request(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "check",
                "topic": topic,
                "queueId": queue_id,
                "queueOffset": offset,
                "maxMsgNums": 1,
                "sysFlag": 0,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
            },
        )
        resp = await self.client.invoke(addr, req, 5000)
        assert resp.code == ResponseCode.SUCCESS, (addr, queue_id, offset, resp.code, resp.remark)
        return decode_record(resp.body, 0)

    # -- evidence -------------------------------------------------------------------------------

    def commit_log(self, name: str, end: int) -> bytes:
        """Node ``name``'s commit log bytes [0, end) as its files hold them."""
        files = sorted((self.nodes[name].store / "commitlog").iterdir())
        return b"".join(f.read_bytes() for f in files)[:end]

    def elections(self, ctl_index: int = 0) -> list[ElectMasterEvent]:
        """The elections in controller ``ctl_index``'s journal (single controller)."""
        data = (self.tmp / f"ctl{ctl_index}" / "journal").read_bytes()
        events = [decode_event(r) for r in read_records(data, "journal")[0]]
        return [e for e in events if isinstance(e, ElectMasterEvent) and e.newMasterElected]

    async def close(self) -> None:
        for node in self.nodes.values():
            if node.proc is not None:
                if node.proc.alive():  # a SIGSTOPped one too
                    node.proc.proc.send_signal(signal.SIGCONT)
                node.proc.kill()
            for proxy in node.to_controllers:
                await proxy.stop()
        for ctl in self.controllers:
            ctl.stop()
        self.ns.kill()
        await self.client.close()
