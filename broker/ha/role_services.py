"""What runs only in the node's current role: HAService on a master; HAClient and
SlaveSynchronize on a slave (RocketMQ's BrokerController.changeSpecialServiceStatus). One node
service that the failover switches off before a role change and on after it.

The node hands in ``build(role) -> [services]``; this holder says which HAService / HAClient is
running now (``ha``, ``ha_client``: None when not), so the send path, status and archiver read
them here rather than from attributes the services would set on the node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.config import BrokerRole
from broker.ha.client import HAClient
from broker.ha.service import HAService
from broker.ha.sync_state_keeper import SyncStateKeeper
from broker.node_service import NodeService
from broker.store.results import PutMessageResult, PutMessageStatus
from broker.store.role import BrokerRoleState

log = logging.getLogger(__name__)


class RoleServices:
    """A node service: ``start()`` builds and starts the current role's services, ``stop()``
    stops them in reverse (a failing stop is logged; the others still stop)."""

    def __init__(
        self,
        role: BrokerRoleState,
        build: Callable[[BrokerRole], list[NodeService]],
        sync_state: SyncStateKeeper | None = None,
    ) -> None:
        self.role = role
        self._build = build
        self.sync_state = sync_state  # controller mode: the master's SyncStateSet (else None)
        self.services: list[NodeService] = []

    @property
    def ha(self) -> HAService | None:
        """The master side while it runs (SYNC_MASTER puts wait on it)."""
        return next((s for s in self.services if isinstance(s, HAService)), None)

    @property
    def ha_client(self) -> HAClient | None:
        """The slave side while it runs."""
        return next((s for s in self.services if isinstance(s, HAClient)), None)

    def admit_put(self) -> str | None:
        """Before a put: why a SYNC_MASTER in controller mode refuses it now (fewer in-sync
        replicas than minInSyncReplicas: RocketMQ's IN_SYNC_REPLICAS_NOT_ENOUGH), else None."""
        keeper = self.sync_state
        if keeper is None or self.ha is None or self.role.role is not BrokerRole.SYNC_MASTER:
            return None
        return keeper.admit_put()

    async def await_replication(self, result: PutMessageResult, timeout_ms: int):
        """After a local put: on a SYNC_MASTER with its HAService running, wait for the slaves
        and return the final PutMessageStatus; otherwise the put's own status."""
        ha = self.ha
        if (
            ha is None
            or result.status is not PutMessageStatus.PUT_OK
            or self.role.role is not BrokerRole.SYNC_MASTER
        ):
            return result.status
        await asyncio.sleep(0)  # into a task of its own before the wait binds one
        return await ha.wait_replicated(result, timeout_ms)

    async def start(self) -> None:
        self.services = self._build(self.role.role)
        started = []
        try:
            for service in self.services:
                await service.start()
                started.append(service)
        except BaseException:
            self.services = started
            await self.stop()
            raise

    async def stop(self) -> None:
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:
                log.exception("stopping %r failed", service)
        self.services = []

    def handlers(self) -> dict:
        return {}  # the role's services answer no requests of their own

    def runtime_info(self) -> dict[str, object]:
        info: dict[str, object] = {}
        for service in self.services:
            info.update(service.runtime_info())
        return info
