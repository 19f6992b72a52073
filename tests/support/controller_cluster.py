"""A broker group in controller mode as real processes on 127.0.0.1, for the process tests of
issue #30, on ``tools/controller_group.py``: one controller (its journal) or three (Raft), a name
server, and nodes ``a``, ``b``, ``c`` (SYNC_MASTER, SYNC_FLUSH, ``enableControllerMode=true``;
the controller decides who is master).

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
import os
import signal
import subprocess
import sys
from pathlib import Path

from broker.controller.events import ElectMasterEvent, decode_event
from broker.controller.journal import read_records
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.reader import decode_record
from tests.controller.support import raft_keys
from tests.support.waiting import wait_for
from tools.controller_group import BROKER_TIMING, ControllerGroup, Node
from tools.localcluster import free_port

__all__ = ["BROKER_NAME", "BROKER_TIMING", "ControllerCluster", "Node"]

BROKER_NAME = "broker-a"
HOOKED = "tests.support.hooked_broker"


def _keys(text: str) -> dict[str, str]:
    """``key=value`` lines as a dict."""
    return dict(line.split("=", 1) for line in text.splitlines() if line.strip())


class ControllerCluster(ControllerGroup):
    @property
    def tmp(self) -> Path:
        return self.workdir

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
        me = cls(tmp, cluster="C", broker_name=BROKER_NAME, module=HOOKED)
        raft = [f"127.0.0.1:{free_port()}" for _ in range(controllers)] if controllers > 1 else []
        try:
            await me.start_controllers(
                controllers, lambda addrs, i: _keys(ctl_keys + raft_keys(addrs, raft, i))
            )
            await me.start_namesrv()
            for name in nodes:
                await me.add_node(name, proxied=True)
            for name in nodes:  # ports picked just before each start: others grab free ones
                props = {
                    "mappedFileSizeCommitLog": 256 * 1024,
                    **BROKER_TIMING,
                    **extra,
                    **(per_node or {}).get(name, {}),
                }
                me.write_conf(name, props)
                await me.start_node(name)
        except BaseException:
            await me.close()
            raise
        return me

    async def run_until_crash(self, name: str, step: str, timeout_s: float = 60) -> int:
        """Start node ``name`` so that it exits (9) right after step ``step`` of its rejoin
        cut; its exit code once it ended."""
        with open(self.tmp / f"{name}.log", "ab") as log:
            argv = [sys.executable, "-m", HOOKED, "--crash-at", step, *self.node_args(name)]
            done = await asyncio.to_thread(
                subprocess.run, argv, stdout=log, stderr=log, timeout=timeout_s
            )
        return done.returncode

    def silence_ha(self, name: str) -> None:
        """Node ``name`` (a master) sends nothing more to its slaves (their links stay open)."""
        os.kill(self.nodes[name].proc.proc.pid, signal.SIGUSR1)

    # -- asking ---------------------------------------------------------------------------------

    async def wait_master(self, after_epoch: int = 0, timeout_ms: int = 60_000):
        """(address, epoch) of the first master the controller names above ``after_epoch``."""

        async def elected():
            addr, epoch, _ = await self.replica_info()
            return (addr, epoch) if addr and epoch > after_epoch else None

        return await wait_for(elected, timeout_ms, what=f"a master above epoch {after_epoch}")

    async def wait_in_sync(self, master: str, slaves: int, timeout_ms: int = 60_000) -> None:
        async def enough() -> bool:
            return await self.in_sync_slaves(master) >= slaves

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
