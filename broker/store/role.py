"""The one owner of what a node *is* now: its role, broker id, epoch and the master it follows.

RocketMQ keeps the role in ``MessageStoreConfig.brokerRole`` and the epochs in
``EpochFileCache``; its controller mode switches both together (``ReplicasManager.changeToMaster``
/ ``changeToSlave``). Here one ``BrokerRoleState`` per node holds them and everything reads it:
the store (may it take puts?), the send path and HAService (SYNC_MASTER waits), offset sync,
the archiver's snapshots and chunk labels, runtime info, admin status. ``BrokerConfig`` says what
was configured (``brokerRole``, ``brokerId``, ``haMasterAddress`` in broker.conf), which after a
failover is no longer what the node is.

Only ``change()`` changes the role (failover: promotion, demotion, a slave following a new
master); ``adopt_epochs()`` and ``begin_epoch()`` change the epoch history (through the epoch
file, persisted before they return). Listeners ``(old_role, new_role, epoch)`` hear a change
through ``announce()``, which the failover calls once the new role's services run, so a listener
(the archiver's snapshot) sees the node as it now serves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker.store.epoch import EpochEntry, EpochFile
from broker.store.store_config import BrokerRole, StoreConfig

log = logging.getLogger(__name__)

RoleListener = Callable[[BrokerRole, BrokerRole, int], None]


@dataclass(frozen=True)
class RoleChange:
    """What one ``change()`` did; ``announce()`` tells the listeners."""

    old: BrokerRole
    new: BrokerRole
    epoch: int


class BrokerRoleState:
    """Build with ``BrokerRoleState.configured(config, epochs)``; the epoch file is loaded by
    the caller (no I/O here). ``epochs`` None: no epoch file (a bare store, tools): epoch 0."""

    def __init__(
        self,
        role: BrokerRole,
        broker_id: int,
        epochs: EpochFile | None = None,
        master_ha_addr: str | None = None,
    ) -> None:
        self._role = role
        self._broker_id = broker_id
        self._epochs = epochs
        self._master_ha_addr = master_ha_addr
        self.listeners: list[RoleListener] = []

    @classmethod
    def configured(cls, config: StoreConfig, epochs: EpochFile | None = None) -> BrokerRoleState:
        """The state a node starts in: what broker.conf says."""
        return cls(config.broker_role, config.broker_id, epochs, config.ha_master_address or None)

    # -- reading --------------------------------------------------------------------------------

    @property
    def role(self) -> BrokerRole:
        return self._role

    @property
    def broker_id(self) -> int:
        return self._broker_id

    @property
    def master_ha_addr(self) -> str | None:
        """The master's HA address this node was told (config or failover); None: learn it
        from the name server."""
        return self._master_ha_addr

    @property
    def epoch(self) -> int:
        return self._epochs.current_epoch if self._epochs is not None else 0

    @property
    def epoch_entries(self) -> list[EpochEntry]:
        return list(self._epochs.entries) if self._epochs is not None else []

    def epochs_json(self, log_end: int) -> list[dict]:
        return self._epochs.to_json(log_end) if self._epochs is not None else []

    # -- changing -------------------------------------------------------------------------------

    def change(
        self, role: BrokerRole, broker_id: int, *, master_ha_addr: str | None = None
    ) -> RoleChange:
        """The one way the role changes: to ``role`` with ``broker_id`` (0 for a master), for a
        slave following the master at ``master_ha_addr`` when given."""
        old = self._role
        self._role, self._broker_id = role, broker_id
        if master_ha_addr:
            self._master_ha_addr = master_ha_addr
        return RoleChange(old, role, self.epoch)

    def begin_epoch(self, epoch: int, start_offset: int) -> None:
        """A new master's epoch from ``start_offset`` (persisted; EpochFileError out of order)."""
        self._require_epochs().append(epoch, start_offset)

    def drop_epochs_past(self, log_end: int) -> list[EpochEntry]:
        """Forget the epochs starting past ``log_end`` (persisted): a power loss took the log's
        unflushed tail they began after (RocketMQ's truncateSuffixByOffset in changeToMaster).
        The dropped entries are returned."""
        epochs = self._require_epochs()
        kept = [e for e in epochs.entries if e.start_offset <= log_end]
        dropped = epochs.entries[len(kept) :]
        if dropped:
            epochs.replace(kept)
        return dropped

    def cut_epochs_to_log(self, log_end: int) -> list[EpochEntry]:
        """At a node's start, once its store recovered: drop the epochs that name no byte of
        the log (a power loss took the tail they describe; ``broker/store/epoch.py``): those
        starting at or past ``log_end`` (RocketMQ's truncateSuffixByOffset). A master keeps
        the epoch it writes under: when it was cut, it begins again at ``log_end``. Persisted;
        the node's epoch does not go down. The dropped entries are returned."""
        epochs = self._require_epochs()
        dropped = epochs.cut_to_log(log_end)
        if dropped and self._role.is_master:
            epochs.append(epochs.current_epoch, log_end)
        return dropped

    def adopt_epochs(self, entries: list[EpochEntry]) -> None:
        """A slave takes its master's history (persisted)."""
        self._require_epochs().replace(entries)

    def announce(self, change: RoleChange) -> None:
        """Tell every listener; one that fails is logged, the others still hear it."""
        for listener in list(self.listeners):
            try:
                listener(change.old, change.new, change.epoch)
            except Exception:
                log.exception("role-change listener %r failed", listener)

    def _require_epochs(self) -> EpochFile:
        if self._epochs is None:
            raise RuntimeError("this role state has no epoch file")
        return self._epochs
