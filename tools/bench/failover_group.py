"""The group ``haproof bench failover`` runs: a standalone controller, a name server and three
SYNC_MASTER nodes in controller mode as real processes on 127.0.0.1, with the heartbeat, lease
and scan settings the figures are measured under (``Settings``)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from broker.config import BrokerConfig
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import ConfigError, HaproofError
from tools.localcluster import (
    LocalProcess,
    LocalProcessError,
    free_port,
    start_broker,
    start_controller,
    start_namesrv,
    write_broker_conf,
)

CLUSTER, GROUP = "BenchCluster", "bench-fo"
NODES = ("n0", "n1", "n2")


@dataclass(frozen=True)
class Settings:
    """What decides how fast a dead master is replaced (docs/controller.md, "Fast failover").

    A kill -9 closes the master's connections: the controller drops it at once (RocketMQ's
    BrokerHousekeepingService) and elects at its next scan (``scan_ms``). A master that goes
    silent instead (hung, partitioned) is dropped after ``heartbeat_timeout_ms``; its lease
    (``lease_ms``, at most 80 % of the timeout) has ended before that, so it refuses writes
    before the controller may elect another."""

    heartbeat_interval_ms: int = 300  # brokerHeartbeatInterval
    heartbeat_timeout_ms: int = 2_000  # controllerHeartBeatTimeoutMills
    lease_ms: int = 1_500  # controllerLeaseMills
    sync_metadata_ms: int = 500  # syncBrokerMetadataPeriod
    ha_heartbeat_ms: int = 300  # haSendHeartbeatInterval
    scan_ms: int = 200  # the controller's scanNotActiveBrokerInterval / scanInactiveMasterInterval

    def check(self) -> None:
        if min(asdict(self).values()) <= 0:
            raise HaproofError("bench failover: every interval and timeout must be > 0 ms")
        if self.lease_ms > self.heartbeat_timeout_ms * 0.8:
            raise HaproofError(
                f"bench failover: --lease-ms {self.lease_ms} must be at most 80% of "
                f"--heartbeat-timeout-ms {self.heartbeat_timeout_ms} (the lease ends first)"
            )
        if self.lease_ms + self.heartbeat_interval_ms > self.heartbeat_timeout_ms * 0.9:
            raise HaproofError(
                f"bench failover: --lease-ms {self.lease_ms} plus the heartbeat interval "
                f"{self.heartbeat_interval_ms} must be at most 90% of --heartbeat-timeout-ms "
                f"{self.heartbeat_timeout_ms} (the brokers' config check)"
            )

    def broker_keys(self) -> dict[str, object]:
        return {
            "brokerHeartbeatInterval": self.heartbeat_interval_ms,
            "controllerHeartBeatTimeoutMills": self.heartbeat_timeout_ms,
            "controllerLeaseMills": self.lease_ms,
            "syncBrokerMetadataPeriod": self.sync_metadata_ms,
            "haSendHeartbeatInterval": self.ha_heartbeat_ms,
        }

    def controller_keys(self) -> dict[str, object]:
        return {
            "scanNotActiveBrokerInterval": self.scan_ms,
            "scanInactiveMasterInterval": self.scan_ms,
        }


def all_ack_supported() -> bool:
    """Whether this broker reads ``allAckInSyncStateSet`` (a SYNC_MASTER answers only once
    every SyncStateSet member acked); without it a SYNC_MASTER answers at one slave's ack."""
    try:
        cfg = BrokerConfig.from_dict({"allAckInSyncStateSet": "true"})
    except ConfigError:  # not a key of this broker
        return False
    return "allAckInSyncStateSet" not in cfg.extra  # read, not only tolerated


async def controller_master(
    client: RemotingClient, controller: str, broker_name: str
) -> tuple[str | None, int, list[int]]:
    """The controller's (master address, masterEpoch, SyncStateSet ids) of ``broker_name``
    (CONTROLLER_GET_REPLICA_INFO); (None, 0, []) when it does not answer."""
    req = RemotingCommand.request(
        RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": broker_name}
    )
    try:
        resp = await client.invoke(controller, req, 2000)
    except HaproofError:
        return None, 0, []
    h = resp.ext_fields
    body = json.loads(resp.body) if resp.code == ResponseCode.SUCCESS and resp.body else {}
    members = [int(b) for b in body.get("syncStateSet") or []]
    return h.get("masterAddress") or None, int(h.get("masterEpoch") or 0), members


class FailoverGroup:
    """The processes; ``kill``/``restart`` a node; what the controller and the nodes say."""

    def __init__(
        self, workdir: Path, settings: Settings, all_ack: bool, log_level: str = "WARNING"
    ) -> None:
        self.workdir, self.settings, self.all_ack = workdir, settings, all_ack
        self.log_level = log_level
        self.procs: dict[str, LocalProcess] = {}
        self.confs: dict[str, tuple[Path, int]] = {}
        self.controller = ""
        self.namesrv = ""
        self.client = RemotingClient()

    def start(self) -> None:
        """Controller, name server and the three nodes (blocking: run it in an executor)."""
        s = self.settings
        ctl = start_controller(self.workdir, s.controller_keys(), log_level=self.log_level)
        self.procs["controller"], self.controller = ctl, ctl.addr
        ns = start_namesrv(self.workdir, log_level=self.log_level)
        self.procs["namesrv"], self.namesrv = ns, ns.addr
        for node in NODES:
            port = free_port()
            props = {
                "brokerClusterName": CLUSTER,
                "brokerName": GROUP,
                "brokerRole": "SYNC_MASTER",
                "flushDiskType": "ASYNC_FLUSH",
                "storePathRootDir": self.workdir / f"store-{node}",
                "listenPort": port,
                "haListenPort": free_port(),
                "namesrvAddr": ns.addr,
                "mappedFileSizeCommitLog": 64 * 1024 * 1024,
                "enableControllerMode": "true",
                "controllerAddr": self.controller,
                **s.broker_keys(),
                **({"allAckInSyncStateSet": "true"} if self.all_ack else {}),
            }
            self.confs[node] = (write_broker_conf(self.workdir / f"{node}.conf", props), port)
            self.restart(node)

    def restart(self, node: str) -> None:
        """(Re)start ``node`` with its broker.conf; blocking until its port answers."""
        conf, port = self.confs[node]
        self.procs[node] = start_broker(node, conf, port, self.workdir, log_level=self.log_level)

    def kill(self, node: str) -> None:
        self.procs[node].kill()

    def freeze(self, node: str) -> None:
        """SIGSTOP: a hung master, its connections open and silent (``kill`` ends it)."""
        self.procs[node].proc.send_signal(signal.SIGSTOP)

    def node_at(self, addr: str) -> str:
        return next(n for n in NODES if self.procs[n].addr == addr)

    async def master(self) -> tuple[str | None, int, list[int]]:
        return await controller_master(self.client, self.controller, GROUP)

    async def in_sync_slaves(self, addr: str) -> int:
        req = RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS)
        try:
            resp = await self.client.invoke(addr, req, 2000)
        except HaproofError:
            return 0
        doc = json.loads(resp.body) if resp.code == ResponseCode.SUCCESS and resp.body else {}
        return sum(1 for s in doc.get("slaves", []) if s.get("inSync"))

    async def wait_master(self, after_epoch: int, timeout_s: float) -> tuple[str, int, float]:
        """Until the controller names a master under an epoch above ``after_epoch``:
        (address, epoch, monotonic time seen)."""
        deadline = time.monotonic() + timeout_s
        while True:
            addr, epoch, _ = await self.master()
            if addr and epoch > after_epoch:
                return addr, epoch, time.monotonic()
            if time.monotonic() > deadline:
                raise HaproofError(f"bench failover: no master elected within {timeout_s:.0f} s")
            await asyncio.sleep(0.02)

    async def wait_in_sync(self, addr: str, slaves: int, timeout_s: float) -> None:
        """Until ``addr`` has ``slaves`` in-sync HA connections and the controller counts them
        in its SyncStateSet (the only candidates of the next election)."""
        deadline = time.monotonic() + timeout_s
        while (
            await self.in_sync_slaves(addr) < slaves or len((await self.master())[2]) < slaves + 1
        ):
            if time.monotonic() > deadline:
                raise HaproofError(
                    f"bench failover: {addr} has fewer than {slaves} in-sync slaves "
                    f"after {timeout_s:.0f} s (logs in {self.workdir})"
                )
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        await self.client.close()

    def stop(self) -> None:
        for name in (*NODES, "namesrv", "controller"):
            p = self.procs.get(name)
            if p is None:
                continue
            try:
                p.stop(20)
            except LocalProcessError:
                pass  # killed after 20 s; the figures are already taken
