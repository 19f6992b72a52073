"""NOTIFY_BROKER_ROLE_CHANGED (1008), validated in full before anything changes: every field
parsed and checked, and for a node told to follow another, that node answering as the master of
this group under the epoch named. A request that fails any check changes nothing (a 1008 naming
``masterAddress=nohost`` once stopped a master's services before failing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.config import BrokerRole
from contracts.errors import HaproofError

_HOST = re.compile(r"[A-Za-z0-9._:\[\]-]{1,253}")


class RoleRequestError(HaproofError):
    """A role change request that cannot be carried out; names the field and why."""


@dataclass(frozen=True)
class RoleRequest:
    master_addr: str
    epoch: int
    role: BrokerRole  # the master's role
    broker_id: int  # the id this node takes when it becomes a slave
    master_ha_addr: str | None


def address(value: str | None, field: str, required: bool = True) -> str | None:
    """``host:port`` with a plausible host and a port 1..65535."""
    if value is None:
        if required:
            raise RoleRequestError(f"missing header field {field!r}")
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise RoleRequestError(f"{field} {value[:80]!r} is not host:port")
    return value


def _int(fields: dict[str, str], field: str, default: int | None = None) -> int:
    raw = fields.get(field)
    if raw is None or raw == "":
        if default is None:
            raise RoleRequestError(f"missing header field {field!r}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise RoleRequestError(f"{field} {raw[:40]!r} is not an integer") from None


def parse_role_request(fields: dict[str, str], default_broker_id: int) -> RoleRequest:
    master_addr = address(fields.get("masterAddress"), "masterAddress")
    epoch = _int(fields, "masterEpoch")
    if epoch < 1:
        raise RoleRequestError(f"masterEpoch {epoch} is not a positive epoch")
    try:
        role = BrokerRole(fields.get("brokerRole") or BrokerRole.SYNC_MASTER.value)
    except ValueError:
        raise RoleRequestError(f"brokerRole {fields.get('brokerRole')!r} is not a role") from None
    if not role.is_master:
        raise RoleRequestError(f"brokerRole {role.value} is not a master's role")
    broker_id = _int(fields, "brokerId", default_broker_id or 1)
    ha_addr = address(fields.get("masterHaAddress"), "masterHaAddress", required=False)
    return RoleRequest(master_addr, epoch, role, broker_id, ha_addr)


def master_mismatch(doc: dict, req: RoleRequest, broker_name: str) -> str | None:
    """Why the node at ``req.master_addr`` (its GET_BROKER_EPOCH_CACHE answer ``doc``) is not
    the master this request names, or None."""
    if doc.get("brokerName") != broker_name:
        return f"{req.master_addr} is a node of {doc.get('brokerName')!r}, not of {broker_name!r}"
    try:
        role = BrokerRole(doc.get("brokerRole"))
    except ValueError:
        role = None
    if role is None or not role.is_master:
        return f"{req.master_addr} is not a master (it answers {doc.get('brokerRole')!r})"
    if doc.get("epoch") != req.epoch:
        return f"{req.master_addr} is master under epoch {doc.get('epoch')}, not {req.epoch}"
    if req.master_ha_addr is not None and doc.get("haServerAddr") != req.master_ha_addr:
        return f"{req.master_addr}'s HA address is {doc.get('haServerAddr')!r}, not {req.master_ha_addr!r}"
    return None
