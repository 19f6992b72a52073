"""The group ``haproof bench failover`` runs: a standalone controller, a name server and three
SYNC_MASTER nodes in controller mode as real processes on 127.0.0.1 (``tools/controller_group.py``), with the heartbeat, lease
and scan settings the figures are measured under (``Settings``)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from broker.config import BrokerConfig
from contracts.errors import ConfigError, HaproofError
from tools.controller_group import ControllerGroup
from tools.localcluster import LocalProcessError

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


class FailoverGroup(ControllerGroup):
    """The processes; ``kill``/``restart`` a node; what the controller and the nodes say."""

    def __init__(
        self, workdir: Path, settings: Settings, all_ack: bool, log_level: str = "WARNING"
    ) -> None:
        super().__init__(workdir, cluster=CLUSTER, broker_name=GROUP, log_level=log_level)
        self.settings, self.all_ack = settings, all_ack

    @property
    def controller(self) -> str:
        return self.ctl_addrs[0]

    @property
    def namesrv(self) -> str:
        return self.ns.addr

    def start(self) -> None:
        """Controller, name server and the three nodes (blocking: run it in an executor)."""
        asyncio.run(self._start_processes())
        s = self.settings
        for node in NODES:
            props = {
                "flushDiskType": "ASYNC_FLUSH",
                "mappedFileSizeCommitLog": 64 * 1024 * 1024,
                **s.broker_keys(),
                **({"allAckInSyncStateSet": "true"} if self.all_ack else {}),
            }
            self.write_conf(node, props)
            self.restart(node)

    async def _start_processes(self) -> None:
        keys = self.settings.controller_keys()
        await self.start_controllers(1, lambda addrs, i: keys, names=["controller"])
        await self.start_namesrv()
        for node in NODES:
            await self.add_node(node)

    def restart(self, node: str) -> None:
        """(Re)start ``node`` with its broker.conf; blocking until its port answers."""
        self.launch(node)

    def freeze(self, node: str) -> None:
        """SIGSTOP: a hung master, its connections open and silent (``kill`` ends it)."""
        self.pause(node)

    def node_at(self, addr: str) -> str:
        return super().node_at(addr).name

    async def master(self) -> tuple[str | None, int, list[int]]:
        addr, epoch, body = await self.replica_info()
        return addr, epoch, [int(b) for b in body.get("syncStateSet") or []]

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
        procs = [n.proc for n in self.nodes.values()] + [self.ns, *self.controllers]
        for p in procs:
            if p is None:
                continue
            try:
                p.stop(20)
            except LocalProcessError:
                pass  # killed after 20 s; the figures are already taken
