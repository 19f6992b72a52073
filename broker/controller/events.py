"""The controller's state-machine events (RocketMQ's controller/impl/event/*): every change of
the replica tables is one of these, appended to the controller's log (journal or Raft) and
applied by ``ReplicasInfoManager.apply`` on every controller, in log order.

Serialised as one JSON object with ``type`` = RocketMQ's EventType id (1 AlterSyncStateSet,
2 ApplyBrokerId, 3 ElectMaster, 5 CleanBrokerData, 6 UpdateBrokerAddress) and the Java event's
field names. An ElectMaster event also carries what the audit needs to judge the election
(``at``, ``unclean``, ``candidates``, ``requester``), so the log is the evidence and a replay
rebuilds it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from contracts.errors import HaproofError

ALTER_SYNC_STATE_SET = 1
APPLY_BROKER_ID = 2
ELECT_MASTER = 3
CLEAN_BROKER_DATA = 5
UPDATE_BROKER_ADDRESS = 6


class EventDecodeError(HaproofError):
    """A logged controller event that cannot be read: the log is damaged or foreign."""


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetEvent:
    brokerName: str
    newSyncStateSet: tuple[int, ...]
    at: int = 0  # wall ms when the leader decided it (evidence only)
    type: int = ALTER_SYNC_STATE_SET


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdEvent:
    clusterName: str
    brokerName: str
    brokerAddress: str
    newBrokerId: int
    registerCheckCode: str
    type: int = APPLY_BROKER_ID


@dataclass(frozen=True, slots=True)
class Candidate:
    """One replica as the controller saw it when it elected (the audit's ``candidates``)."""

    brokerId: int
    brokerAddr: str
    epoch: int
    maxOffset: int
    confirmOffset: int
    priority: int
    inSyncStateSet: bool
    alive: bool


@dataclass(frozen=True, slots=True)
class ElectMasterEvent:
    brokerName: str
    newMasterElected: bool
    newMasterBrokerId: int | None = None
    at: int = 0
    unclean: bool = False
    designated: bool = False
    requester: int = -1  # the brokerId that asked; -1: the controller itself
    candidates: tuple[Candidate, ...] = field(default_factory=tuple)
    type: int = ELECT_MASTER


@dataclass(frozen=True, slots=True)
class CleanBrokerDataEvent:
    brokerName: str
    brokerIdSetToClean: tuple[int, ...] | None = None  # None: the whole broker set
    type: int = CLEAN_BROKER_DATA


@dataclass(frozen=True, slots=True)
class UpdateBrokerAddressEvent:
    clusterName: str
    brokerName: str
    brokerAddress: str
    brokerId: int
    type: int = UPDATE_BROKER_ADDRESS


Event = (
    AlterSyncStateSetEvent
    | ApplyBrokerIdEvent
    | ElectMasterEvent
    | CleanBrokerDataEvent
    | UpdateBrokerAddressEvent
)

_TYPES: dict[int, type] = {
    ALTER_SYNC_STATE_SET: AlterSyncStateSetEvent,
    APPLY_BROKER_ID: ApplyBrokerIdEvent,
    ELECT_MASTER: ElectMasterEvent,
    CLEAN_BROKER_DATA: CleanBrokerDataEvent,
    UPDATE_BROKER_ADDRESS: UpdateBrokerAddressEvent,
}


def encode_event(event: Event) -> bytes:
    return json.dumps(asdict(event), separators=(",", ":"), sort_keys=True).encode()


def decode_event(data: bytes) -> Event:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventDecodeError(f"controller event is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("type") not in _TYPES:
        raise EventDecodeError(f"controller event of unknown type: {str(doc)[:120]}")
    cls = _TYPES[doc["type"]]
    try:
        return cls(**_tuples(cls, doc))
    except (TypeError, ValueError) as exc:
        raise EventDecodeError(f"controller event {doc['type']} has bad fields: {exc}") from exc


def _tuples(cls: type, doc: dict[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    for name in ("newSyncStateSet", "brokerIdSetToClean"):
        if out.get(name) is not None:
            out[name] = tuple(int(x) for x in out[name])
    if cls is ElectMasterEvent:
        out["candidates"] = tuple(Candidate(**c) for c in out.get("candidates") or ())
    return out
