"""The master's side of the SyncStateSet (RocketMQ 5's AutoSwitchHAService, AutoSwitchHAConnection
and the HA half of CommitLog.asyncPutMessage / GroupTransferService), as pure decisions over
what HAService reports: per slave its ack offsets and the master's offset at each transfer, and
the injected clock. No I/O: the caller sends the proposals (alterSyncStateSet, 1001) and applies
the controller's answer.

Rules, as RocketMQ has them (checked in its source):

- **Caught up** (AutoSwitchHAConnection.maybeExpandInSyncStateSet): a slave whose ack reaches the
  master's max offset at the last transfer to it is caught up *now* if the ack is the master's
  max offset, else at that transfer's time; a slave the master has nothing to send is caught up
  now. Caught-up times only rise.
- **Shrink** (maybeShrinkSyncStateSet): a member not caught up for longer than
  ``haMaxTimeSlaveNotCatchup`` (default 15 s), or with no connection, leaves; a slave whose
  connection closes leaves at once (removeConnection). The master never leaves.
- **Expand** (maybeExpandInSyncStateSet): a slave outside the set joins when its ack is at least
  the confirmOffset and at least the start offset of the master's current epoch.
- **In flight**: a change is a proposal (``proposed``) until the controller answers
  (``applied``); meanwhile acks are counted over the union of the set and the proposal
  (getSyncStateSet), and ``in_sync_replicas`` is the larger of the two sizes.
- **confirmOffset** (CommitLog.getConfirmOffset, computeConfirmOffset): the master's max offset
  while the set and any proposal are the master alone (RocketMQ: the set alone) or
  ``allAckInSyncStateSet`` is off; else the least ack of
  the members of the union, unchanged while a member has no connection (RocketMQ #6662) or no
  ack yet (RocketMQ skips it). Never lowered: it is what acknowledged clients were promised.
- **Admission** (CommitLog, controller mode): a put that waits for replicas is refused
  IN_SYNC_REPLICAS_NOT_ENOUGH when ``in_sync_replicas`` < ``minInSyncReplicas``
  (RocketMQ answers SYSTEM_ERROR, "in-sync replicas not enough").
- **Acknowledged** (GroupTransferService.doWaitTransfer): with ``allAckInSyncStateSet`` only when
  every member of the union other than the master acked the message's end (a set of the master
  alone: at once); otherwise when the master and ``inSyncReplicas`` - 1 connected slaves did.
  Unlike RocketMQ, a put admitted under ``minInSyncReplicas`` is not answered while the union
  has fewer members than that (the set shrank while it waited: RocketMQ answers PUT_OK from
  the master alone, an acknowledgement on one disk; found by the simulation); it times out.

Wiring (after the broker's node runs controller mode): HAService calls ``on_transfer`` /
``on_idle`` from each connection's write loop and ``on_ack`` from its read loop, ``on_disconnect``
when a connection closes; a LoopService calls ``shrink`` every second; the send path asks
``admit_put`` before appending and ``acknowledged`` instead of the single ``push2slave_max``;
the controller client sends every non-None proposal and calls ``applied`` with the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker.clock import Clock

IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
ALL = 2**63 - 1  # acknowledged_offset when no replica's ack is awaited


@dataclass(frozen=True)
class SyncStateConfig:
    """MessageStoreConfig's keys (RocketMQ's names and defaults)."""

    ha_max_time_slave_not_catchup_ms: int = 15_000  # haMaxTimeSlaveNotCatchup
    all_ack_in_sync_state_set: bool = False  # allAckInSyncStateSet
    min_in_sync_replicas: int = 1  # minInSyncReplicas
    in_sync_replicas: int = 1  # inSyncReplicas (acks counted with the master, when not all-ack)


@dataclass
class _Slave:
    ack: int = -1  # slaveAckOffset; -1 until the first ack
    master_max_at_transfer: int = -1  # lastMasterMaxOffset
    transfer_ms: float = 0.0  # lastTransferTimeMs


@dataclass
class SyncStateSet:
    master_id: int
    members: frozenset[int]  # the set the controller last confirmed (local)
    config: SyncStateConfig
    clock: Clock
    epoch_start_offset: int = 0  # start offset of the master's current epoch
    confirm: int = 0
    proposed: frozenset[int] | None = None  # sent to the controller, not answered yet
    caught_up_ms: dict[int, float] = field(default_factory=dict)  # connectionCaughtUpTimeTable
    slaves: dict[int, _Slave] = field(default_factory=dict)  # connected slaves
    # the master's own durable end (SYNC_FLUSH: its flushed offset), None: its log end
    master_durable: Callable[[], int] | None = None

    def __post_init__(self) -> None:
        self.members = frozenset(self.members) | {self.master_id}

    # -- what HAService reports ---------------------------------------------------------------

    def on_transfer(self, slave_id: int, master_max_offset: int) -> None:
        """Data was sent to ``slave_id`` while the master's log ended at ``master_max_offset``."""
        s = self.slaves.setdefault(slave_id, _Slave())
        s.master_max_at_transfer, s.transfer_ms = master_max_offset, self.clock.monotonic_ms()

    def on_idle(self, slave_id: int) -> None:
        """Nothing left to send to ``slave_id``: it is caught up now."""
        self.slaves.setdefault(slave_id, _Slave())
        self._caught_up(slave_id, self.clock.monotonic_ms())

    def on_ack(self, slave_id: int, ack: int, master_max_offset: int) -> frozenset[int] | None:
        """A slave acknowledged ``ack``; returns a proposal that adds it, if it now qualifies."""
        s = self.slaves.setdefault(slave_id, _Slave())
        s.ack = ack
        threshold = self.confirm_offset(master_max_offset)  # getConfirmOffset, this ack in
        proposal = None
        if ack >= s.master_max_at_transfer:
            now = self.clock.monotonic_ms()
            self._caught_up(slave_id, now if ack == master_max_offset else s.transfer_ms)
            proposal = self._maybe_expand(slave_id, ack, threshold)
        self.confirm_offset(master_max_offset)
        return proposal

    def on_disconnect(self, slave_id: int) -> frozenset[int] | None:
        """The slave's connection closed: it leaves the set at once (a proposal), if in it."""
        self.slaves.pop(slave_id, None)
        if slave_id == self.master_id or slave_id not in self.members:
            return None
        return self._propose(self.members - {slave_id})

    def shrink(self) -> frozenset[int] | None:
        """Members not caught up for haMaxTimeSlaveNotCatchup, or not connected, leave."""
        now = self.clock.monotonic_ms()
        limit = self.config.ha_max_time_slave_not_catchup_ms
        keep = {
            m
            for m in self.members
            if m == self.master_id
            or (m in self.caught_up_ms and m in self.slaves and now - self.caught_up_ms[m] <= limit)
        }
        return self._propose(frozenset(keep)) if keep != self.members else None

    def applied(self, members: frozenset[int] | set[int], master_max_offset: int) -> None:
        """The controller's answer (or a set it notified): the set is ``members`` now."""
        self.members = frozenset(members) | {self.master_id}
        self.proposed = None
        self.confirm_offset(master_max_offset)

    def rejected(self) -> None:
        """The controller refused the proposal (a fenced epoch, not the leader): it is dropped;
        the next ack or shrink proposes again."""
        self.proposed = None

    # -- what the send path asks --------------------------------------------------------------

    @property
    def union(self) -> frozenset[int]:
        return self.members | (self.proposed or frozenset())

    def in_sync_replicas(self) -> int:
        """inSyncReplicasNums: the larger of the set and the proposal while one is in flight."""
        return max(len(self.members), len(self.proposed or ()))

    def admit_put(self) -> str | None:
        """IN_SYNC_REPLICAS_NOT_ENOUGH when too few replicas are in sync to take a put that
        waits for replicas; None when it may be appended."""
        if self.in_sync_replicas() < self.config.min_in_sync_replicas:
            return IN_SYNC_REPLICAS_NOT_ENOUGH
        return None

    def acknowledged(self, next_offset: int) -> bool:
        """May a put ending at ``next_offset`` be answered (SYNC_MASTER)?"""
        if self.config.all_ack_in_sync_state_set:
            others = self.union - {self.master_id}
            if len(others) + 1 < self.config.min_in_sync_replicas:
                return False  # the set shrank below minInSyncReplicas while the put waited
            return all(
                m in self.slaves and self.slaves[m].ack >= next_offset for m in others
            )  # a set of the master alone: at once
        acks = 1 + sum(1 for s in self.slaves.values() if s.ack >= next_offset)
        return acks >= self.config.in_sync_replicas

    def acknowledged_offset(self) -> int:
        """The highest end offset ``acknowledged`` answers now (``ALL``: any): a put ending at
        or below it may be answered, one beyond it waits."""
        if self.config.all_ack_in_sync_state_set:
            others = self.union - {self.master_id}
            if len(others) + 1 < self.config.min_in_sync_replicas:
                return -1  # admitted, then the set shrank: not on minInSyncReplicas disks
            if not others:
                return ALL
            if any(m not in self.slaves for m in others):
                return -1
            return min(self.slaves[m].ack for m in others)
        need = self.config.in_sync_replicas - 1
        if need <= 0:
            return ALL
        acks = sorted((s.ack for s in self.slaves.values()), reverse=True)
        return acks[need - 1] if len(acks) >= need else -1

    def confirm_offset(self, master_max_offset: int) -> int:
        """CommitLog.getConfirmOffset in controller mode: the master's max offset while the set
        is the master alone or acks are not all awaited; else computeConfirmOffset over the
        union, kept while a member has no connection or has not acked yet (RocketMQ skips a
        member without an ack; safer to wait for it). Never lowered. "Alone" means no other
        member in the union either: RocketMQ looks at the set only, so while a slave's joining
        is in flight it would claim bytes that slave has not acked (found by the property
        test). Under SYNC_FLUSH (``master_durable``) at most the master's flushed offset:
        unlike RocketMQ, or a consumer reads bytes a power loss of the master takes, and the
        master, renewing its epoch with the shorter log, has the slaves cut them (found by the
        simulation, seed 5018)."""
        if self.master_durable is not None:  # what a power loss of the master keeps
            master_max_offset = min(master_max_offset, self.master_durable())
        if len(self.union) == 1 or not self.config.all_ack_in_sync_state_set:
            self.confirm = max(self.confirm, master_max_offset)
            return self.confirm
        others = self.union - {self.master_id}
        if any(m not in self.slaves or self.slaves[m].ack < 0 for m in others):
            return self.confirm
        acks = [self.slaves[m].ack for m in others]
        self.confirm = max(self.confirm, min([master_max_offset, *acks]))
        return self.confirm

    # -- inside -------------------------------------------------------------------------------

    def _caught_up(self, slave_id: int, at_ms: float) -> None:
        self.caught_up_ms[slave_id] = max(self.caught_up_ms.get(slave_id, 0.0), at_ms)

    def _maybe_expand(self, slave_id: int, ack: int, confirm: int) -> frozenset[int] | None:
        if slave_id in self.members or slave_id in (self.proposed or ()):
            return None  # in the set, or its joining is already in flight
        if ack >= confirm and ack >= self.epoch_start_offset:
            return self._propose(self.members | {slave_id})
        return None

    def _propose(self, members: frozenset[int]) -> frozenset[int] | None:
        """One change in flight at a time: a second proposal would drop the first one's members
        from the union before the controller answered (the next ack or shrink proposes again,
        from the set the controller confirmed)."""
        if self.proposed is not None:
            return None
        self.proposed = frozenset(members) | {self.master_id}
        return self.proposed
