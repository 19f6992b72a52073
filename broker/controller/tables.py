"""The controller's replicated state (RocketMQ's ReplicasInfoManager tables, SyncStateInfo and
BrokerReplicaInfo) and the one function that changes it: ``ReplicaTables.apply(event)``.

Pure and deterministic: no clock, no I/O, no liveness. Applying the same events in the same
order on any controller (or in the simulation) gives the same tables; ``to_snapshot`` /
``from_snapshot`` round-trip them as strict JSON for the journal's snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
)

FIRST_BROKER_CONTROLLER_ID = 1  # MixAll.FIRST_BROKER_CONTROLLER_ID


@dataclass
class SyncStateInfo:
    clusterName: str
    brokerName: str
    masterEpoch: int = 0
    syncStateSetEpoch: int = 0
    syncStateSet: set[int] = field(default_factory=set)
    masterBrokerId: int | None = None

    @property
    def first_time_for_elect(self) -> bool:
        return self.masterEpoch == 0


@dataclass
class BrokerReplicaInfo:
    clusterName: str
    brokerName: str
    nextAssignBrokerId: int = FIRST_BROKER_CONTROLLER_ID
    # brokerId -> (address, registerCheckCode "<addr>;<millis>")
    brokerIdInfo: dict[int, tuple[str, str]] = field(default_factory=dict)

    def address(self, broker_id: int | None) -> str | None:
        entry = self.brokerIdInfo.get(broker_id) if broker_id is not None else None
        return entry[0] if entry else None

    def check_code(self, broker_id: int) -> str | None:
        entry = self.brokerIdInfo.get(broker_id)
        return entry[1] if entry else None


class ReplicaTables:
    """Per brokerName: who is master under which epochs, the SyncStateSet, and brokerId ->
    address/registerCheckCode. ``applied`` counts the events applied (the log position)."""

    def __init__(self) -> None:
        self.replicas: dict[str, BrokerReplicaInfo] = {}
        self.sync_states: dict[str, SyncStateInfo] = {}
        self.applied = 0

    def contains(self, broker_name: str) -> bool:
        return broker_name in self.replicas and broker_name in self.sync_states

    # -- the only mutation ---------------------------------------------------------------

    def apply(self, event: Event) -> None:
        self.applied += 1
        if isinstance(event, AlterSyncStateSetEvent):
            if self.contains(event.brokerName):
                info = self.sync_states[event.brokerName]
                info.syncStateSet = set(event.newSyncStateSet)
                info.syncStateSetEpoch += 1
        elif isinstance(event, ApplyBrokerIdEvent):
            self._apply_broker_id(event)
        elif isinstance(event, ElectMasterEvent):
            self._elect_master(event)
        elif isinstance(event, CleanBrokerDataEvent):
            self._clean(event)
        elif isinstance(event, UpdateBrokerAddressEvent):
            replica = self.replicas.get(event.brokerName)
            if replica is not None and event.brokerId in replica.brokerIdInfo:
                code = replica.brokerIdInfo[event.brokerId][1]
                replica.brokerIdInfo[event.brokerId] = (event.brokerAddress, code)

    def _apply_broker_id(self, event: ApplyBrokerIdEvent) -> None:
        name = event.brokerName
        if not self.contains(name):
            self.replicas[name] = BrokerReplicaInfo(event.clusterName, name)
            self.sync_states[name] = SyncStateInfo(event.clusterName, name)
        replica = self.replicas[name]
        if event.newBrokerId not in replica.brokerIdInfo:
            replica.brokerIdInfo[event.newBrokerId] = (
                event.brokerAddress,
                event.registerCheckCode,
            )
            # RocketMQ increments; a max keeps ids unique when a broker applied a larger one
            replica.nextAssignBrokerId = max(replica.nextAssignBrokerId + 1, event.newBrokerId + 1)

    def _elect_master(self, event: ElectMasterEvent) -> None:
        if not self.contains(event.brokerName):
            return
        info = self.sync_states[event.brokerName]
        info.masterEpoch += 1
        if event.newMasterElected and event.newMasterBrokerId is not None:
            info.masterBrokerId = event.newMasterBrokerId
            info.syncStateSet = {event.newMasterBrokerId}
            info.syncStateSetEpoch += 1
        else:  # the master is gone and nobody could follow: no master, the set is kept
            info.masterBrokerId = None

    def _clean(self, event: CleanBrokerDataEvent) -> None:
        name = event.brokerName
        if not event.brokerIdSetToClean:
            self.replicas.pop(name, None)
            self.sync_states.pop(name, None)
            return
        if not self.contains(name):
            return
        replica, info = self.replicas[name], self.sync_states[name]
        for broker_id in event.brokerIdSetToClean:
            replica.brokerIdInfo.pop(broker_id, None)
            info.syncStateSet.discard(broker_id)
        if not replica.brokerIdInfo:
            del self.replicas[name]
        if not info.syncStateSet:
            del self.sync_states[name]

    # -- snapshot --------------------------------------------------------------------------

    def to_snapshot(self) -> dict:
        return {
            "applied": self.applied,
            "replicaInfoTable": {
                name: {
                    "clusterName": r.clusterName,
                    "nextAssignBrokerId": r.nextAssignBrokerId,
                    "brokerIdInfo": {str(k): list(v) for k, v in sorted(r.brokerIdInfo.items())},
                }
                for name, r in sorted(self.replicas.items())
            },
            "syncStateSetInfoTable": {
                name: {
                    "clusterName": s.clusterName,
                    "masterEpoch": s.masterEpoch,
                    "syncStateSetEpoch": s.syncStateSetEpoch,
                    "syncStateSet": sorted(s.syncStateSet),
                    "masterBrokerId": s.masterBrokerId,
                }
                for name, s in sorted(self.sync_states.items())
            },
        }

    @classmethod
    def from_snapshot(cls, doc: dict) -> ReplicaTables:
        tables = cls()
        tables.applied = int(doc["applied"])
        for name, r in doc["replicaInfoTable"].items():
            tables.replicas[name] = BrokerReplicaInfo(
                r["clusterName"],
                name,
                int(r["nextAssignBrokerId"]),
                {int(k): (v[0], v[1]) for k, v in r["brokerIdInfo"].items()},
            )
        for name, s in doc["syncStateSetInfoTable"].items():
            master = s["masterBrokerId"]
            tables.sync_states[name] = SyncStateInfo(
                s["clusterName"],
                name,
                int(s["masterEpoch"]),
                int(s["syncStateSetEpoch"]),
                {int(x) for x in s["syncStateSet"]},
                None if master is None else int(master),
            )
        return tables
