"""What every controller applies committed events to: the tables, plus the audit records each
election and SyncStateSet change produces (DESIGN.md section 3 kinds ``elected``,
``election_failed``, ``sync_state_set_changed``), kept as a bounded stream the brokers or the
archiver read by sequence number (``records_since``).

A lock guards the tables: the Raft engine applies from its own thread while requests read them
on the event loop. Applying is pure and deterministic (time comes from the events themselves).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from broker.controller.events import AlterSyncStateSetEvent, ElectMasterEvent, Event
from broker.controller.tables import ReplicaTables
from contracts.archive_layout import make_event

MAX_RECORDS = 10_000  # kept in memory; the log itself keeps every election for replay


class ControllerStateMachine:
    def __init__(self, tables: ReplicaTables | None = None) -> None:
        self.tables = tables or ReplicaTables()
        self.lock = threading.RLock()
        self._records: deque[tuple[int, dict]] = deque(maxlen=MAX_RECORDS)
        self._next_seq = 1
        self.listeners: list[Callable[[dict], None]] = []

    def apply(self, event: Event) -> None:
        with self.lock:
            self.tables.apply(event)
            record = self._record(event)
        if record is not None:
            self._records.append((self._next_seq, record))
            self._next_seq += 1
            for listener in list(self.listeners):
                listener(record)

    def restore(self, tables: ReplicaTables) -> None:
        with self.lock:
            self.tables = tables

    def records_since(self, seq: int = 0) -> list[tuple[int, dict]]:
        """(sequence, record) pairs after ``seq``, oldest first (those still in memory)."""
        return [(s, r) for s, r in list(self._records) if s > seq]

    def _record(self, event: Event) -> dict | None:
        if isinstance(event, ElectMasterEvent):
            return self._election_record(event)
        if isinstance(event, AlterSyncStateSetEvent):
            info = self.tables.sync_states.get(event.brokerName)
            replica = self.tables.replicas.get(event.brokerName)
            if info is None or replica is None:
                return None
            members = [replica.address(b) or str(b) for b in sorted(info.syncStateSet)]
            return make_event(
                "sync_state_set_changed",
                replica.address(info.masterBrokerId) or "",
                info.clusterName,
                event.brokerName,
                event.at,
                info.masterEpoch,
                members=members,
                memberIds=sorted(info.syncStateSet),
                syncStateSetEpoch=info.syncStateSetEpoch,
            )
        return None

    def _election_record(self, event: ElectMasterEvent) -> dict | None:
        info = self.tables.sync_states.get(event.brokerName)
        replica = self.tables.replicas.get(event.brokerName)
        if info is None or replica is None:
            return None
        candidates = [
            {
                "node": c.brokerAddr,
                "brokerId": c.brokerId,
                "epoch": c.epoch,
                "maxOffset": c.maxOffset,
                "confirmOffset": c.confirmOffset,
                "priority": c.priority,
                "inSyncStateSet": c.inSyncStateSet,
                "alive": c.alive,
            }
            for c in event.candidates
        ]
        common = dict(
            masterEpoch=info.masterEpoch,
            candidates=candidates,
            designated=event.designated,
            requester=event.requester,
        )
        if not event.newMasterElected:
            return make_event(
                "election_failed",
                "",
                info.clusterName,
                event.brokerName,
                event.at,
                info.masterEpoch,
                **common,
            )
        return make_event(
            "elected",
            replica.address(event.newMasterBrokerId) or "",
            info.clusterName,
            event.brokerName,
            event.at,
            info.masterEpoch,
            brokerId=event.newMasterBrokerId,
            syncStateSetEpoch=info.syncStateSetEpoch,
            unclean=event.unclean,
            **common,
        )
