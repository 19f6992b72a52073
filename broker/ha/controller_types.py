"""What the broker's controller client (``broker/ha/controller_client.py``) works with: its
settings (``ClientConfig``, from broker.conf's controller-mode keys), what it last applied
(``Replica``) and the node parts it is handed (``RoleOwner``, ``OffsetReader``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class RoleOwner(Protocol):
    """What this service changes on the node (today BrokerRoleState; the role owner of #24)."""

    def master_epoch(self) -> int: ...

    async def become_master(
        self,
        *,
        broker_id: int,
        master_epoch: int,
        sync_state_set: set[int],
        sync_state_set_epoch: int,
    ) -> None: ...

    async def become_slave(
        self, *, broker_id: int, master_epoch: int, master_broker_id: int, master_addr: str
    ) -> None: ...

    def fence_writes(self, reason: str) -> None: ...

    def unfence_writes(self) -> None: ...


class OffsetReader(Protocol):
    def max_offset(self) -> int: ...

    def confirm_offset(self) -> int: ...


@dataclass(frozen=True)
class ClientConfig:
    cluster: str
    broker_name: str
    broker_addr: str
    controller_addrs: tuple[str, ...]  # controllerAddr=host:port;host:port
    heartbeat_interval_ms: int = 1_000  # brokerHeartbeatInterval
    heartbeat_timeout_ms: int = 10_000  # controllerHeartBeatTimeoutMills
    lease_ms: int = 8_000
    sync_metadata_period_ms: int = 5_000  # syncBrokerMetadataPeriod
    election_priority: int = 2**31 - 1  # brokerElectionPriority: lower wins
    switch_timeout_ms: int = 30_000  # a slave's role switch at most (ours: role_switch.py)

    def __post_init__(self) -> None:
        if not self.controller_addrs:
            raise ValueError("controllerAddr names no controller")
        if not 0 < self.lease_ms <= self.heartbeat_timeout_ms * 0.8:
            raise ValueError(
                f"lease {self.lease_ms} ms must be > 0 and at most 80% of the "
                f"controller heartbeat timeout {self.heartbeat_timeout_ms} ms"
            )


@dataclass
class Replica:
    """What this broker last applied from the controller."""

    master_broker_id: int | None = None
    master_addr: str | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0
