"""The controller's decisions (RocketMQ's ReplicasInfoManager request methods): each reads the
tables and the local liveness and returns a ``Result`` (response code, header fields, body, and
the events to append). Nothing changes here: the events change the tables once the log has them
(``ReplicaTables.apply``). Pure: time comes in as ``now_ms``, liveness as a ``Liveness``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.controller import election
from broker.controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
)
from broker.controller.tables import FIRST_BROKER_CONTROLLER_ID, ReplicaTables
from broker.remoting.codes import ResponseCode as RC


@dataclass
class Result:
    code: int = RC.SUCCESS
    remark: str | None = None
    header: dict[str, Any] = field(default_factory=dict)
    body: Any = None  # JSON-able (fastjson-compatible); None: no body
    events: list[Event] = field(default_factory=list)


def _fail(code: int, remark: str, **header) -> Result:
    return Result(code=code, remark=remark, header=header)


def _sss(ids, epoch: int) -> dict:
    return {"syncStateSet": sorted(ids), "syncStateSetEpoch": epoch}


class ReplicasInfoManager:
    """Decisions over ``tables``; ``unclean_allowed`` is enableElectUncleanMaster."""

    def __init__(self, tables: ReplicaTables, *, unclean_allowed: bool = False) -> None:
        self.tables = tables
        self.unclean_allowed = unclean_allowed

    def alter_sync_state_set(
        self,
        broker_name: str,
        master_id: int,
        master_epoch: int,
        new_set: set[int],
        set_epoch: int,
        live: election.Liveness,
        now_ms: int = 0,
    ) -> Result:
        """RocketMQ's checks, in its order and with its codes."""
        t = self.tables
        if not t.contains(broker_name):
            return _fail(
                RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed"
            )
        info, replica = t.sync_states[broker_name], t.replicas[broker_name]
        if set(new_set) == info.syncStateSet:
            return _fail(
                RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                "The newSyncStateSet is equal with oldSyncStateSet",
            )
        if info.masterBrokerId is None or info.masterBrokerId != master_id:
            return _fail(
                RC.CONTROLLER_INVALID_MASTER,
                f"the current master is {info.masterBrokerId}, not {master_id}",
            )
        if master_epoch != info.masterEpoch:
            return _fail(
                RC.CONTROLLER_FENCED_MASTER_EPOCH,
                f"the current master epoch is {info.masterEpoch}, not {master_epoch}",
            )
        if set_epoch != info.syncStateSetEpoch:
            return _fail(
                RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"the current syncStateSet epoch is {info.syncStateSetEpoch}, not {set_epoch}",
            )
        for replica_id in sorted(new_set):
            if replica_id not in replica.brokerIdInfo:
                return _fail(RC.CONTROLLER_INVALID_REPLICAS, f"replica {replica_id} doesn't exist")
            if not live.is_alive(replica.clusterName, broker_name, replica_id):
                return _fail(RC.CONTROLLER_BROKER_NOT_ALIVE, f"replica {replica_id} isn't alive")
        if info.masterBrokerId not in new_set:
            return _fail(
                RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"the newSyncStateSet lacks the master {info.masterBrokerId}",
            )
        epoch = info.syncStateSetEpoch + 1
        return Result(
            header={"newSyncStateSetEpoch": epoch},
            body=_sss(new_set, epoch),
            events=[AlterSyncStateSetEvent(broker_name, tuple(sorted(new_set)), now_ms)],
        )

    def elect_master(
        self,
        broker_name: str,
        broker_id: int,
        designate: bool,
        live: election.Liveness,
        now_ms: int = 0,
    ) -> Result:
        t = self.tables
        if not t.contains(broker_name):
            return _fail(
                RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered"
            )
        info, replica = t.sync_states[broker_name], t.replicas[broker_name]
        cluster, first = replica.clusterName, info.first_time_for_elect
        cands = tuple(
            election.candidate(live, cluster, broker_name, bid, addr, bid in info.syncStateSet)
            for bid, (addr, _) in sorted(replica.brokerIdInfo.items())
        )
        if first and broker_id in replica.brokerIdInfo:  # it just asked: it is alive
            cands = tuple(c if c.brokerId != broker_id else _alive(c) for c in cands)
        designated = broker_id if designate and broker_id >= 0 else None
        old = info.masterBrokerId
        if (
            old is not None
            and old != broker_id
            and not live.is_alive(cluster, broker_name, old)
            and live.lease_may_hold(cluster, broker_name, old)
        ):  # its connection closed, but it may still take writes until its lease ends
            return _fail(
                RC.CONTROLLER_ELECT_MASTER_FAILED,
                f"the master {old} of {broker_name} may still hold its lease: not before its "
                "heartbeat timeout",
            )
        new_master, unclean = election.choose(
            cands,
            old_master=info.masterBrokerId,
            designated=designated,
            unclean_allowed=self.unclean_allowed,
            first_election=first,
        )
        # the master itself asking (it restarted: its epoch may have lost a tail a slave holds)
        # gets a new epoch; anybody else asking while the master stays gets the master as is
        renew = broker_id == new_master and not designate
        if new_master is not None and new_master == info.masterBrokerId and not renew:
            return Result(
                code=RC.CONTROLLER_MASTER_STILL_EXIST,
                remark=f"The old master {new_master} is still alive, no need to elect a new "
                f"master for broker {broker_name}",
                header=self._master_header(broker_name, info.masterEpoch, info.syncStateSetEpoch),
                body={"syncStateSet": sorted(info.syncStateSet)},
            )
        event_args = dict(
            at=now_ms, designated=designated is not None, requester=broker_id, candidates=cands
        )
        if new_master is not None:
            event = ElectMasterEvent(broker_name, True, new_master, unclean=unclean, **event_args)
            header = {
                "masterBrokerId": new_master,
                "masterAddress": replica.address(new_master),
                "masterEpoch": info.masterEpoch + 1,
                "syncStateSetEpoch": info.syncStateSetEpoch + 1,
            }
            body = {
                "brokerMemberGroup": self._member_group(broker_name),
                "syncStateSet": [new_master],
            }
            return Result(header=header, body=body, events=[event])
        if broker_id < 0:  # the controller asked: record that the master is gone
            return Result(
                code=RC.CONTROLLER_MASTER_NOT_AVAILABLE,
                remark="Old master has down and failed to elect a new broker master",
                events=[ElectMasterEvent(broker_name, False, None, **event_args)],
            )
        return _fail(RC.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")

    def _master_header(self, broker_name: str, master_epoch: int, set_epoch: int) -> dict:
        info, replica = self.tables.sync_states[broker_name], self.tables.replicas[broker_name]
        return {
            "masterBrokerId": info.masterBrokerId,
            "masterAddress": replica.address(info.masterBrokerId),
            "masterEpoch": master_epoch,
            "syncStateSetEpoch": set_epoch,
        }

    def _member_group(self, broker_name: str) -> dict:
        replica = self.tables.replicas[broker_name]
        return {
            "cluster": replica.clusterName,
            "brokerName": broker_name,
            "brokerAddrs": {str(k): v[0] for k, v in sorted(replica.brokerIdInfo.items())},
        }

    # -- broker ids and registration --------------------------------------------------------

    def get_next_broker_id(self, cluster: str, broker_name: str) -> Result:
        replica = self.tables.replicas.get(broker_name)
        next_id = FIRST_BROKER_CONTROLLER_ID if replica is None else replica.nextAssignBrokerId
        return Result(
            header={"clusterName": cluster, "brokerName": broker_name, "nextBrokerId": next_id}
        )

    def apply_broker_id(
        self, cluster: str, broker_name: str, broker_id: int, check_code: str
    ) -> Result:
        address = check_code.split(";")[0]
        header = {"clusterName": cluster, "brokerName": broker_name}
        event = ApplyBrokerIdEvent(cluster, broker_name, address, broker_id, check_code)
        replica = self.tables.replicas.get(broker_name)
        if replica is None:
            if broker_id == FIRST_BROKER_CONTROLLER_ID:
                return Result(header=header, events=[event])
            return _fail(
                RC.CONTROLLER_BROKER_ID_INVALID,
                f"Broker-set: {broker_name} hasn't "
                f"been registered in controller, but broker try to apply brokerId: "
                f"{broker_id}",
                **header,
            )
        if broker_id not in replica.brokerIdInfo or replica.check_code(broker_id) == check_code:
            return Result(header=header, events=[event])
        return _fail(
            RC.CONTROLLER_BROKER_ID_INVALID,
            f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}",
            **header,
        )

    def register_broker(
        self,
        cluster: str,
        broker_name: str,
        broker_id: int,
        address: str,
        live: election.Liveness,
    ) -> Result:
        t = self.tables
        header: dict[str, Any] = {"clusterName": cluster, "brokerName": broker_name}
        if not t.contains(broker_name):
            return _fail(
                RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"Broker-set: {broker_name} hasn't been registered in controller",
                **header,
            )
        info, replica = t.sync_states[broker_name], t.replicas[broker_name]
        if broker_id not in replica.brokerIdInfo:
            return _fail(
                RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"BrokerId: {broker_id} hasn't been registered in broker-set: {broker_name}",
                **header,
            )
        master = info.masterBrokerId
        if master is not None and live.is_alive(cluster, broker_name, master):
            header.update(
                self._master_header(broker_name, info.masterEpoch, info.syncStateSetEpoch)
            )
        result = Result(header=header, body=_sss(info.syncStateSet, info.syncStateSetEpoch))
        if address != replica.address(broker_id):
            result.events.append(UpdateBrokerAddressEvent(cluster, broker_name, address, broker_id))
        return result

    def get_replica_info(self, broker_name: str) -> Result:
        t = self.tables
        if not t.contains(broker_name):
            return _fail(RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed")
        info, replica = t.sync_states[broker_name], t.replicas[broker_name]
        return Result(
            header={
                "masterBrokerId": info.masterBrokerId,
                "masterAddress": replica.address(info.masterBrokerId),
                "masterEpoch": info.masterEpoch,
            },
            body=_sss(info.syncStateSet, info.syncStateSetEpoch),
        )

    def get_sync_state_data(self, broker_names: list[str], live: election.Liveness) -> Result:
        table: dict[str, dict] = {}
        for name in broker_names:
            if not self.tables.contains(name):
                continue
            info, replica = self.tables.sync_states[name], self.tables.replicas[name]
            in_sync, not_in_sync = [], []
            for bid, (addr, _) in sorted(replica.brokerIdInfo.items()):
                alive = live.is_alive(replica.clusterName, name, bid)
                row = {"brokerName": name, "brokerId": bid, "brokerAddress": addr, "alive": alive}
                (in_sync if bid in info.syncStateSet else not_in_sync).append(row)
            table[name] = {
                "masterBrokerId": info.masterBrokerId,
                "masterAddress": replica.address(info.masterBrokerId),
                "masterEpoch": info.masterEpoch,
                "syncStateSetEpoch": info.syncStateSetEpoch,
                "inSyncReplicas": in_sync,
                "notInSyncReplicas": not_in_sync,
            }
        return Result(body={"replicasInfoTable": table})

    def clean_broker_data(
        self,
        cluster: str,
        broker_name: str,
        ids_to_clean: str | None,
        clean_living: bool,
        live: election.Liveness,
    ) -> Result:
        ids: tuple[int, ...] | None = None
        bad = RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        if ids_to_clean and ids_to_clean.strip():
            try:
                ids = tuple(sorted({int(x) for x in ids_to_clean.split(";") if x.strip()}))
            except ValueError:
                return _fail(
                    bad,
                    "Please set the option <brokerControllerIdsToClean> as "
                    f"id;id;..., got {ids_to_clean!r}",
                )
        if not clean_living:
            info = self.tables.sync_states.get(broker_name)
            if ids is None and info is not None and info.masterBrokerId is not None:
                return _fail(bad, f"Broker {broker_name} is still alive, clean up failure")
            for bid in ids or ():
                if live.is_alive(cluster, broker_name, bid):
                    return _fail(
                        bad, f"Broker [{broker_name}, {bid}] is still alive, clean up failure"
                    )
        if self.tables.contains(broker_name):
            return Result(events=[CleanBrokerDataEvent(broker_name, ids)])
        return _fail(bad, f"Broker {broker_name} is not existed,clean broker data failure.")

    def scan_need_reelect(self, live: election.Liveness) -> list[str]:
        """Broker sets whose master is not alive while another member still is."""
        out = []
        for name, info in sorted(self.tables.sync_states.items()):
            master, cluster = info.masterBrokerId, info.clusterName
            if master is None or live.is_alive(cluster, name, master):
                continue
            replica = self.tables.replicas.get(name)
            if replica and any(live.is_alive(cluster, name, b) for b in replica.brokerIdInfo):
                out.append(name)
        return out


def _alive(c: election.Candidate) -> election.Candidate:
    return election.Candidate(
        c.brokerId,
        c.brokerAddr,
        c.epoch,
        c.maxOffset,
        c.confirmOffset,
        c.priority,
        c.inSyncStateSet,
        True,
    )
