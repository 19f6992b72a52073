"""A broker's controller-assigned id, allocated so that a crash at any step leaves a state the
next start resumes from (RocketMQ's persistent unique broker id: INITIAL ->
CREATE_TEMP_METADATA_FILE_DONE -> CREATE_METADATA_FILE_DONE -> REGISTERED).

Files in the store root: ``brokerIdentity`` (the id, once the controller accepted it) and
``brokerIdentity-temp`` (the id asked for and its registerCheckCode ``<addr>;<ms>``), each
strict JSON written atomically (temp file, fsync, rename, fsync of the directory).

Safer than RocketMQ: the temp file is dropped only when the controller explicitly refuses the id
(CONTROLLER_BROKER_ID_INVALID). After a timeout or a lost answer the same id and check code are
applied again, which the controller accepts (same check code), so an id the controller recorded
is never orphaned.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from broker.remoting.codes import RequestCode as Q
from broker.remoting.codes import ResponseCode as RC
from broker.remoting.command import RemotingCommand
from contracts.errors import HaproofError

Invoke = Callable[[str, RemotingCommand, int], Awaitable[RemotingCommand]]
TIMEOUT_MS = 3_000


class RegisterState(Enum):
    INITIAL = "INITIAL"
    CREATE_TEMP_METADATA_FILE_DONE = "CREATE_TEMP_METADATA_FILE_DONE"
    CREATE_METADATA_FILE_DONE = "CREATE_METADATA_FILE_DONE"
    REGISTERED = "REGISTERED"


class IdentityError(HaproofError):
    """The broker's identity files disagree with its config, or the controller refused."""


@dataclass(frozen=True)
class Identity:
    clusterName: str
    brokerName: str
    brokerId: int
    registerCheckCode: str = ""


def _write_atomic(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BrokerIdentityStore:
    def __init__(self, store_root: str | Path, cluster: str, broker_name: str) -> None:
        self.path = Path(store_root) / "brokerIdentity"
        self.temp_path = Path(store_root) / "brokerIdentity-temp"
        self.cluster, self.broker_name = cluster, broker_name

    def _read(self, path: Path) -> Identity | None:
        if not path.exists():
            return None
        try:
            doc = json.loads(path.read_text())
            ident = Identity(
                doc["clusterName"],
                doc["brokerName"],
                int(doc["brokerId"]),
                doc.get("registerCheckCode", ""),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise IdentityError(f"{path}: not a broker identity: {exc}") from exc
        if (ident.clusterName, ident.brokerName) != (self.cluster, self.broker_name):
            raise IdentityError(
                f"{path}: belongs to {ident.clusterName}/{ident.brokerName}, this broker is "
                f"{self.cluster}/{self.broker_name}: fix the config or move the store aside"
            )
        return ident

    def state(self) -> tuple[RegisterState, Identity | None]:
        done = self._read(self.path)
        if done is not None:
            return RegisterState.CREATE_METADATA_FILE_DONE, done
        temp = self._read(self.temp_path)
        if temp is not None:
            return RegisterState.CREATE_TEMP_METADATA_FILE_DONE, temp
        return RegisterState.INITIAL, None

    def write_temp(self, ident: Identity) -> None:
        _write_atomic(self.temp_path, ident.__dict__)

    def commit(self, ident: Identity) -> None:
        """The id the controller accepted: the final file first, then the temp goes."""
        _write_atomic(
            self.path,
            {
                "clusterName": ident.clusterName,
                "brokerName": ident.brokerName,
                "brokerId": ident.brokerId,
            },
        )
        self.temp_path.unlink(missing_ok=True)

    def drop_temp(self) -> None:
        self.temp_path.unlink(missing_ok=True)


async def allocate_broker_id(
    store: BrokerIdentityStore, invoke: Invoke, leader: str, broker_addr: str, now_ms: int
) -> int:
    """Resume the allocation from whatever step the files show; the accepted id. Raises
    IdentityError when the controller refuses (a later round starts over)."""
    state, ident = store.state()
    if state is RegisterState.CREATE_METADATA_FILE_DONE:
        return ident.brokerId
    if state is RegisterState.INITIAL:
        fields = {"clusterName": store.cluster, "brokerName": store.broker_name}
        resp = await invoke(
            leader, RemotingCommand.request(Q.CONTROLLER_GET_NEXT_BROKER_ID, fields), TIMEOUT_MS
        )
        if resp.code != RC.SUCCESS:
            raise IdentityError(f"GET_NEXT_BROKER_ID refused: {resp.code} {resp.remark}")
        ident = Identity(
            store.cluster,
            store.broker_name,
            int(resp.ext_fields["nextBrokerId"]),
            f"{broker_addr};{now_ms}",
        )
        store.write_temp(ident)
    fields = {
        "clusterName": ident.clusterName,
        "brokerName": ident.brokerName,
        "appliedBrokerId": ident.brokerId,
        "registerCheckCode": ident.registerCheckCode,
    }
    resp = await invoke(
        leader, RemotingCommand.request(Q.CONTROLLER_APPLY_BROKER_ID, fields), TIMEOUT_MS
    )
    if resp.code == RC.CONTROLLER_BROKER_ID_INVALID:
        store.drop_temp()  # taken by another broker: start over with a new id
        raise IdentityError(f"brokerId {ident.brokerId} refused: {resp.remark}")
    if resp.code != RC.SUCCESS:
        raise IdentityError(f"APPLY_BROKER_ID: {resp.code} {resp.remark}")
    store.commit(ident)
    return ident.brokerId
