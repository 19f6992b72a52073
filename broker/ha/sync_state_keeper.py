"""The master's SyncStateSet in controller mode, wired (``broker/ha/sync_state.py`` decides;
this keeper feeds it and carries its proposals).

- A term begins when the controller makes this node master (``begin``: its id, the set and set
  epoch the controller named, the start offset of its epoch) and ends when it becomes a slave
  (``end``). Outside a term every hook is a no-op and HAService keeps its classic rule.
- HAService reports per slave (by the controller broker id the slave introduced, 906):
  ``on_transfer`` / ``on_idle`` from its write loop, ``on_ack`` from its read loop,
  ``on_disconnect`` when the connection closes; it asks ``admit_put`` (minInSyncReplicas)
  before a put, waits for ``acknowledged_offset`` (allAckInSyncStateSet: every member of the
  union of the set and a proposal in flight) and reports ``confirm_offset`` (never lowered).
- What consumers may read (``read_gate``, the store's read end): the confirmOffset while the
  union has a slave and allAckInSyncStateSet is on, unless ``readUnCommitted``; else (and
  outside a term) the whole log, as RocketMQ's getReputEndOffset over getConfirmOffset.
- Every second (``SHRINK_PERIOD_MS``, or at once when an ack or a closed connection makes a
  proposal) a round sends the proposal in flight, else what ``shrink`` proposes, to the
  controller as CONTROLLER_ALTER_SYNC_STATE_SET (1001) through ``alter`` (the controller
  client); the answer is ``applied`` (and archived: ``sync_state_set_changed``) or
  ``rejected``. A newer set the controller holds for this master epoch (its notify or pull) is
  taken as applied.
- Without allAckInSyncStateSet a SYNC_MASTER put waits, as haproof's classic SYNC_MASTER does,
  for one slave's ack (RocketMQ's ``inSyncReplicas`` default of 1 would answer before any
  replica holds the bytes; haproof does not read that key).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from broker.clock import Clock
from broker.config import FlushDiskType
from broker.ha import wire
from broker.ha.sync_state import SyncStateConfig, SyncStateSet
from broker.loop_service import LoopService
from contracts.errors import HaproofError

log = logging.getLogger(__name__)

SHRINK_PERIOD_MS = 1_000
IN_SYNC_REPLICAS_WITHOUT_ALL_ACK = 2  # the master and one slave, as a classic SYNC_MASTER
# remark RocketMQ's SendMessageProcessor answers IN_SYNC_REPLICAS_NOT_ENOUGH with (SYSTEM_ERROR)
NOT_ENOUGH_REMARK = "in-sync replicas not enough"

Alter = Callable[[frozenset[int]], Awaitable[int | None]]  # new set epoch, None: refused
ControllerView = Callable[[], tuple[int, frozenset[int], int]]  # masterEpoch, set, set epoch
Emit = Callable[[str, dict], None]


class SyncStateKeeper(LoopService):
    """Built once per node in controller mode (``config``: the node's live config, read at each
    term); ``connect`` hands it the controller client's ``alter`` and ``view``, ``on_event`` the
    archiver's event sink; HAService sets ``on_change`` (re-check the waiting puts)."""

    def __init__(
        self,
        config,
        node_name: str,
        clock: Clock,
        read_gate: Callable[[int | None], None] = lambda end: None,
    ) -> None:
        super().__init__("sync-state-set", period_ms=SHRINK_PERIOD_MS, clock=clock)
        self.config, self.node_name = config, node_name
        self.state: SyncStateSet | None = None
        self.master_epoch = 0
        self.set_epoch = 0
        self.names: dict[int, str] = {}  # slave broker id -> node name (from HAService)
        self.master_max: Callable[[], int] = lambda: 0
        self.on_change: Callable[[], None] = lambda: None
        self.read_gate = read_gate
        self._sent_confirm: dict[str, int] = {}  # slave peer -> confirmOffset it was last sent
        self.on_event: Emit = lambda kind, fields: None
        self._alter: Alter | None = None
        self._view: ControllerView | None = None
        self._ha = None  # the HAService of this term (attach)

    def connect(self, alter: Alter, view: ControllerView) -> None:
        self._alter, self._view = alter, view

    # -- the term -------------------------------------------------------------------------------

    def begin(self, master_id: int, members, master_epoch: int, set_epoch: int, start: int):
        cfg = self.config
        conf = SyncStateConfig(
            ha_max_time_slave_not_catchup_ms=cfg.ha_max_time_slave_not_catchup_ms,
            all_ack_in_sync_state_set=cfg.all_ack_in_sync_state_set,
            min_in_sync_replicas=cfg.min_in_sync_replicas,
            in_sync_replicas=IN_SYNC_REPLICAS_WITHOUT_ALL_ACK,
        )
        self.state = SyncStateSet(master_id, frozenset(members), conf, self.clock)
        self.state.epoch_start_offset = self.state.confirm = start
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.state.master_durable = self._master_flushed
        self.master_epoch, self.set_epoch = master_epoch, set_epoch
        self._moved()

    def end(self) -> None:
        """The term ends (a slave now): the read end stays until its new master's frames move
        it (the tail past it may be cut at the rejoin)."""
        self.state = None

    def header_for(self, conn) -> Callable[[int, int], bytes]:
        """``conn``'s frame headers: with the confirmOffset (RocketMQ's AutoSwitch header)."""

        def header(offset: int, size: int) -> bytes:
            confirm = self.confirm_offset(self.master_max())
            self._sent_confirm[conn.peer] = confirm
            return wire.build_header(offset, size, confirm)

        return header

    def confirm_moved(self, conn) -> bool:
        """Did the confirmOffset rise past what ``conn``'s slave was last told?"""
        return self.confirm_offset(self.master_max()) > self._sent_confirm.get(conn.peer, -1)

    def _moved(self) -> None:
        """Acks or the set changed: re-check the waiting puts, move the consumers' read end."""
        self.on_change()
        st = self.state
        alone = st is not None and len(st.union) <= 1  # gated alone only by its flush
        gated = st is not None and st.config.all_ack_in_sync_state_set
        gated = gated and (not alone or st.master_durable is not None)
        if gated and not self.config.read_uncommitted:
            self.read_gate(st.confirm_offset(self.master_max()))
        else:
            self.read_gate(None)
        if self._ha is not None and st is not None:  # the slaves learn it at once
            confirm = st.confirm_offset(self.master_max())
            for c in self._ha.connections:
                if confirm > self._sent_confirm.get(c.peer, -1):
                    c.new_data.set()

    @property
    def active(self) -> bool:
        return self.state is not None

    # -- what HAService reports -----------------------------------------------------------------

    def attach(self, ha) -> None:
        """The HAService of this term: its slaves' ids and names (906), its waiting puts."""
        self._ha = ha
        self.master_max = lambda: ha.store.max_phy_offset

        def changed() -> None:  # the waiting puts, and who waits for the confirmOffset
            ha.transfer.on_ack(self.acknowledged_offset())
            ha.confirm_watch.moved()

        self.on_change = changed

    def _master_flushed(self) -> int:
        ha = self._ha
        return self.master_max() if ha is None else ha.store.flushed_offset

    def _slave_id(self, conn) -> int | None:
        """The slave's controller broker id (its 906 introduction); None until it said."""
        ha = self._ha
        sid = ha.peer_ids.get(conn.peer)
        if sid and conn.peer in ha.peer_names:
            self.names[sid] = ha.peer_names[conn.peer]
        return sid

    def conn_transfer(self, conn, master_max_offset: int) -> None:
        if self.state is not None and (sid := self._slave_id(conn)):
            self.on_transfer(sid, master_max_offset)

    def conn_idle(self, conn) -> None:
        """Nothing left to send: caught up now, once the slave acked all it was sent (RocketMQ
        counts the idle write loop alone, so a stopped slave whose socket still takes bytes
        stays in the set until its connection times out)."""
        if self.state is not None and conn.ack_offset >= conn.sent_end:
            if sid := self._slave_id(conn):
                self.on_idle(sid)

    def conn_ack(self, conn, ack: int) -> None:
        if self.state is not None and (sid := self._slave_id(conn)):
            self.on_ack(sid, ack, self.master_max())
        if self.state is not None:
            self._moved()

    def flushed(self) -> None:
        """A put's bytes are flushed on the master (SYNC_FLUSH): the confirmOffset may rise."""
        st = self.state
        if st is not None and st.master_durable is not None:
            before = st.confirm
            if st.confirm_offset(self.master_max()) > before:
                self._moved()

    def conn_closed(self, peer: str) -> None:
        self._sent_confirm.pop(peer, None)
        if self.state is not None and (sid := self._ha.peer_ids.get(peer)):
            self.on_disconnect(sid)

    def on_transfer(self, slave_id: int, master_max_offset: int) -> None:
        if self.state is not None:
            self.state.on_transfer(slave_id, master_max_offset)

    def on_idle(self, slave_id: int) -> None:
        if self.state is not None:
            self.state.on_idle(slave_id)

    def on_ack(self, slave_id: int, ack: int, master_max_offset: int) -> None:
        if self.state is not None and self.state.on_ack(slave_id, ack, master_max_offset):
            self.wakeup()

    def on_disconnect(self, slave_id: int) -> None:
        if self.state is not None and self.state.on_disconnect(slave_id):
            self.wakeup()

    # -- what the send path asks ----------------------------------------------------------------

    def admit_put(self) -> str | None:
        """None: a put may be appended; else why not (minInSyncReplicas)."""
        st = self.state
        if st is None or st.admit_put() is None:
            return None
        return (
            f"{NOT_ENOUGH_REMARK}: {st.in_sync_replicas()} in the SyncStateSet "
            f"{sorted(st.union)}, minInSyncReplicas={st.config.min_in_sync_replicas}"
        )

    def acknowledged_offset(self) -> int:
        return -1 if self.state is None else self.state.acknowledged_offset()

    def confirm_offset(self, master_max_offset: int) -> int:
        st = self.state
        return master_max_offset if st is None else st.confirm_offset(master_max_offset)

    def status(self) -> dict:
        st = self.state
        if st is None:
            return {}
        return {
            "syncStateSet": sorted(st.members),
            "syncStateSetEpoch": self.set_epoch,
            "syncStateSetProposed": None if st.proposed is None else sorted(st.proposed),
        }

    # -- the round ------------------------------------------------------------------------------

    async def run_once(self) -> None:
        st = self.state
        if st is None:
            return
        self._adopt_controller_view(st)
        proposal = st.proposed or st.shrink()
        if proposal is None:
            return
        before = st.members
        try:
            new_epoch = None if self._alter is None else await self._alter(proposal)
        except HaproofError as exc:
            log.warning("SyncStateSet %s not proposed: %s", sorted(proposal), exc)
            new_epoch = None
        if self.state is not st:
            return  # the term ended while the controller answered
        if new_epoch is None:
            log.info("SyncStateSet %s not taken by the controller", sorted(proposal))
            st.rejected()
            return
        st.applied(proposal, self.master_max())
        self.set_epoch = new_epoch
        self._changed(before, st.members, "proposed by this master")

    def _adopt_controller_view(self, st: SyncStateSet) -> None:
        if self._view is None:
            return
        master_epoch, members, set_epoch = self._view()
        if master_epoch == self.master_epoch and set_epoch > self.set_epoch:
            before = st.members
            st.applied(members, self.master_max())
            self.set_epoch = set_epoch
            self._changed(before, st.members, "held by the controller")

    def _changed(self, before: frozenset[int], after: frozenset[int], how: str) -> None:
        log.warning(
            "SyncStateSet %s -> %s (epoch %d, %s)",
            sorted(before),
            sorted(after),
            self.set_epoch,
            how,
        )
        self._moved()
        if before == after:
            return
        master = self.state.master_id if self.state is not None else -1
        self.on_event(
            "sync_state_set_changed",
            {
                "members": [self._name(m, master) for m in sorted(after)],
                "memberIds": sorted(after),
                "syncStateSetEpoch": self.set_epoch,
                "masterEpoch": self.master_epoch,
                "left": sorted(before - after),
                "joined": sorted(after - before),
            },
        )

    def _name(self, broker_id: int, master: int) -> str:
        if broker_id == master:
            return self.node_name
        return self.names.get(broker_id, f"brokerId {broker_id}")
