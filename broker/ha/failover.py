"""Failover: epochs, promotion, demotion and a rejoining node's truncation.

RocketMQ 4.x switches roles by hand; RocketMQ 5's controller mode adds epochs. We do what the
latter does with the former's wire:

- Every node keeps an epoch file (``broker/store/epoch.py``). A node that starts as a master with
  none begins epoch 1 at its log end.
- ``NOTIFY_BROKER_ROLE_CHANGED`` (1008, RocketMQ 5's code) tells a node its group's master:
  ``masterAddress`` (remoting), ``masterEpoch``, ``masterHaAddress`` (ours), ``brokerRole`` (the
  master's role, ours) and ``brokerId`` (ours: the id a node that becomes a slave takes). The node
  named by ``masterAddress`` becomes master under ``masterEpoch`` — a new epoch entry at its log
  end, brokerId 0, HAService instead of HAClient, an immediate re-registration so the name server
  routes to it. Every other node becomes (or stays) its slave.
- Before a slave replicates from a master it asks for the master's epochs
  (``GET_BROKER_EPOCH_CACHE``, 1007), finds the last point both logs agree on, truncates its
  commit log and consume queues above it (logged, and told to the node's ``TruncationListeners``),
  and adopts the master's epochs. So an old master that comes back loses only its unreplicated
  tail, and never feeds it to anyone.
- ``promote()`` is the controller the admin command and the tests drive.
"""

from __future__ import annotations

import json
import logging

from broker.config import BrokerRole
from broker.ha.promotion_rules import UncleanPromotionError, refuse_unclean
from broker.ha.reconcile import EpochReconciler, FailoverError
from broker.ha.rejoin_cut import finish_interrupted
from broker.ha.role_request import (
    RoleRequest,
    RoleRequestError,
    master_mismatch,
    parse_role_request,
)
from broker.ha.role_services import RoleServices
from broker.live_config import LiveConfig
from broker.node_service import RuntimeInfoTable
from broker.registration import NamesrvRegistration
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState, RoleChange
from contracts.errors import HaproofError, RemotingError

__all__ = [
    "FailoverError",
    "FailoverService",
    "UncleanPromotionError",
    "group_nodes",
    "promote",
]

log = logging.getLogger(__name__)


# -- node side -----------------------------------------------------------------------------------


class FailoverService:
    """A node service: answers 1007/1008, switches the node's role (through its role state,
    ``role``, and its role services, ``replication``); ``reconciler`` truncates before a slave
    replicates, ``registration`` re-registers after a switch, ``info`` is the node's runtime
    info (in the HA status)."""

    def __init__(
        self,
        store: MessageStore,
        config: LiveConfig,
        role: BrokerRoleState,
        replication: RoleServices,
        reconciler: EpochReconciler,
        registration: NamesrvRegistration,
        info: RuntimeInfoTable,
        *,
        node_name: str,
    ) -> None:
        self.store = store
        self.config = config
        self.role = role
        self.replication = replication
        self.reconciler = reconciler
        self.registration = registration
        self.info = info
        self.node_name = node_name

    async def start(self) -> None:
        role = self.role
        finish_interrupted(self.store, role)  # a rejoin cut a crash interrupted
        end = self.store.max_phy_offset
        dropped = role.cut_epochs_to_log(end)
        if dropped:
            log.warning(
                "%s: epochs %s name no byte of the log (end %d)", self.node_name, dropped, end
            )
        if role.role.is_master and not role.epoch_entries:
            role.begin_epoch(1, self.store.max_phy_offset)

    async def stop(self) -> None:
        await self.reconciler.close()

    def runtime_info(self) -> dict[str, object]:
        return {}

    def handlers(self) -> dict:
        return {
            RequestCode.GET_BROKER_EPOCH_CACHE: self._epoch_cache,
            RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self._role_changed,
            RequestCode.GET_BROKER_HA_STATUS: self._ha_status,
            RequestCode.EXCHANGE_BROKER_HA_INFO: self._ha_info,
        }

    async def _ha_info(self, conn, req: RemotingCommand) -> RemotingCommand:
        """A slave names its HA connection (its local address) so a master's status and
        snapshots can list slaves by node name."""
        ha = self.replication.ha
        if ha is not None:
            ha.peer_names[req.field("haClientAddr")] = req.field("nodeName")
            broker_id = req.opt_field("brokerId", None)
            if broker_id is not None and str(broker_id).isdigit():
                ha.peer_ids[req.field("haClientAddr")] = int(broker_id)
        return req.make_response(ResponseCode.SUCCESS)

    def describe(self) -> dict:
        cfg, role = self.config, self.role
        end = self.store.max_phy_offset
        return {
            "clusterName": cfg.broker_cluster_name,
            "brokerName": cfg.broker_name,
            "brokerId": role.broker_id,
            "nodeName": self.node_name,
            "brokerRole": role.role.value,
            "brokerAddr": cfg.broker_addr,
            "haServerAddr": cfg.ha_server_addr,
            "maxOffset": end,
            "epoch": role.epoch,
            "epochList": role.epochs_json(end),
        }

    async def _epoch_cache(self, conn, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(self.describe()).encode())

    async def _ha_status(self, conn, req: RemotingCommand) -> RemotingCommand:
        doc = self.describe()
        doc.pop("epochList")
        ha = self.replication.ha
        if ha is not None:
            doc.update(ha.status())
            if str(req.opt_field("ackHistory", "false")).lower() == "true":
                # [monotonic s, best ack offset] each time the best slave ack rose
                doc["ackHistory"] = [list(e) for e in ha.ack_history]
        client = self.replication.ha_client
        if client is not None:
            doc.update(
                {"masterHaAddress": client.master_ha_addr, "masterConnected": client.connected}
            )
        doc.update(self.info.table())
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(doc).encode())

    async def _role_changed(self, conn, req: RemotingCommand) -> RemotingCommand:
        """Validated in full (broker/ha/role_request.py) before anything changes."""
        try:
            change = parse_role_request(req.ext_fields, self.role.broker_id)
            if change.master_addr != self.config.broker_addr:
                await self._check_master(change)
        except (RoleRequestError, FailoverError) as exc:
            log.error("refused a role change (nothing changed): %s", exc)
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        master_addr, epoch = change.master_addr, change.epoch
        try:
            if master_addr == self.config.broker_addr:
                await self.become_master(epoch, change.role)
            else:
                await self.become_slave(master_addr, change.master_ha_addr, change.broker_id)
        except (HaproofError, ValueError) as exc:
            log.error("role change to master %s (epoch %d) failed: %s", master_addr, epoch, exc)
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        return req.make_response(
            ResponseCode.SUCCESS,
            ext_fields={"epoch": self.role.epoch, "maxOffset": self.store.max_phy_offset},
        )

    async def _check_master(self, change: RoleRequest) -> None:
        """The node named as the new master must say so itself, before this one follows it."""
        if change.broker_id <= 0:
            raise FailoverError(f"a slave needs a brokerId > 0, not {change.broker_id}")
        doc = await self.reconciler.fetch_epochs(change.master_addr)
        problem = master_mismatch(doc, change, self.config.broker_name)
        if problem is not None:
            raise FailoverError(problem)

    async def become_master(self, epoch: int, role: BrokerRole) -> None:
        state, store = self.role, self.store
        if not role.is_master:
            raise FailoverError(f"a master cannot take role {role.value}")
        if state.role.is_master and epoch == state.epoch:
            return  # already done (a retried request)
        if epoch <= state.epoch:
            raise FailoverError(f"epoch {epoch} is not newer than this node's epoch {state.epoch}")
        await self.replication.stop()
        # A slave's tail can be part of a record (HA frames split records and the master died
        # mid-record): the new epoch starts after the last whole record, never after half one.
        whole = store.dispatched_offset
        torn_end = store.max_phy_offset
        if whole < torn_end:
            log.warning(
                "%s: dropping a torn record tail [%d, %d) before becoming master",
                self.node_name,
                whole,
                torn_end,
            )
            self.reconciler.truncate(whole)
        self._adopt_orphan_topics()
        start = store.max_phy_offset
        dropped = state.drop_epochs_past(start)
        if dropped:  # else the new entry would come before them: out of order, never master
            log.warning("%s: epochs %s start past the log end %d", self.node_name, dropped, start)
        state.begin_epoch(epoch, start)
        change = state.change(role, 0)
        await self.replication.start()
        self.registration.request()
        log.warning(
            "%s is now %s of %s under epoch %d from offset %d",
            self.node_name,
            role.value,
            self.config.broker_name,
            epoch,
            start,
        )
        state.announce(change)

    def _adopt_orphan_topics(self) -> None:
        """A slave promoted before SlaveSynchronize copied a new topic's config holds the
        topic's messages and queues but no config: create one, or pulls would answer
        TOPIC_NOT_EXIST for acknowledged messages."""
        store = self.store
        store.topic_config.adopt_orphan_queues(list(store.queues), self.node_name)

    async def become_slave(self, master_addr: str, master_ha_addr: str | None, broker_id: int):
        if broker_id <= 0:
            raise FailoverError(f"a slave needs a brokerId > 0, not {broker_id}")
        await self.replication.stop()
        change = self.role.change(BrokerRole.SLAVE, broker_id, master_ha_addr=master_ha_addr)
        try:
            await self.reconciler.reconcile(master_addr)
        except HaproofError:
            # the master cannot be asked now: follow it anyway (the HA client reconciles before
            # it replicates, and retries), never a slave that follows nobody
            await self._follow(master_addr, master_ha_addr)
            raise
        await self._follow(master_addr, master_ha_addr)
        if change.old is not BrokerRole.SLAVE:
            log.warning("%s is now a slave of %s", self.node_name, master_addr)
            self.role.announce(RoleChange(change.old, change.new, self.role.epoch))

    async def _follow(self, master_addr: str, master_ha_addr: str | None) -> None:
        await self.replication.start()
        client = self.replication.ha_client
        if client is not None:
            client.set_master(master_ha_addr, master_addr)
        self.registration.request()


# -- controller side ----------------------------------------------------------------------------


async def group_nodes(client: RemotingClient, namesrv_addrs: list[str], broker_name: str) -> list:
    """The broker addresses the name servers list for one group."""
    last: Exception | None = None
    for addr in namesrv_addrs:
        try:
            resp = await client.invoke(
                addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3000
            )
        except RemotingError as exc:
            last = exc
            continue
        if resp.code != ResponseCode.SUCCESS:  # e.g. NO_PERMISSION from an ACL name server
            last = RemotingError(f"code {resp.code}: {resp.remark}")
            continue
        table = json.loads(resp.body).get("brokerAddrTable", {})
        data = table.get(broker_name)
        if data is None:
            raise FailoverError(f"name server {addr} knows no broker group {broker_name!r}")
        return sorted(set(data.get("brokerAddrs", {}).values()))
    raise FailoverError(f"no name server answered ({'; '.join(namesrv_addrs)}): {last}")


async def promote(
    broker_name: str,
    node_name: str,
    *,
    namesrv_addrs: list[str] | None = None,
    broker_addrs: list[str] | None = None,
    role: BrokerRole = BrokerRole.SYNC_MASTER,
    rpc_hook=None,
    min_epoch: int = 0,
    unclean: bool = False,
) -> dict:
    """Make ``node_name`` the master of ``broker_name`` under a new epoch; point every other
    reachable node of the group at it. Returns what was done. ``rpc_hook`` signs (ACL).

    The new epoch is one above the newest a reachable node knows, and at least ``min_epoch``:
    an unreachable last master may have taken epochs nobody reachable knows of, and reusing one
    would put two logs under the same epoch (a caller that remembers the epochs it handed out,
    as a controller does, passes the next one).

    A node behind another reachable one (by last epoch, then log end), or any while more than
    one node is unreachable, is refused (``broker/ha/promotion_rules.py``). ``unclean``
    (RocketMQ's enableElectUncleanMaster, ``--unclean``) promotes it anyway."""
    client = RemotingClient(rpc_hook=rpc_hook)
    try:
        addrs = list(broker_addrs or [])
        if namesrv_addrs:
            addrs += await group_nodes(client, namesrv_addrs, broker_name)
        nodes, unreachable = {}, []
        for addr in dict.fromkeys(addrs):
            try:
                resp = await client.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE), 3000
                )
            except RemotingError:
                unreachable.append(addr)
                continue
            if resp.code == ResponseCode.SUCCESS:
                doc = json.loads(resp.body)
                if doc.get("brokerName") == broker_name:
                    nodes[doc["nodeName"]] = doc
        target = nodes.get(node_name)
        if target is None:
            raise FailoverError(
                f"node {node_name!r} of {broker_name} is not reachable "
                f"(reachable: {sorted(nodes) or 'none'}; unreachable: {unreachable or 'none'})"
            )
        if not unclean:
            refuse_unclean(target, nodes, unreachable)
        epoch = max(max(int(d.get("epoch", 0)) for d in nodes.values()) + 1, min_epoch)
        await _notify(client, target["brokerAddr"], target, epoch, role, target["brokerId"] or 1)
        slaves = []
        for name, doc in sorted(nodes.items()):
            if name == node_name:
                continue
            slave_id = doc["brokerId"] or target["brokerId"] or 1
            await _notify(client, doc["brokerAddr"], target, epoch, role, slave_id)
            slaves.append(name)
        return {
            "brokerName": broker_name,
            "master": node_name,
            "masterAddr": target["brokerAddr"],
            "epoch": epoch,
            "slaves": slaves,
            "unreachable": unreachable,
        }
    finally:
        await client.close()


async def _notify(client, addr: str, target: dict, epoch: int, role: BrokerRole, broker_id: int):
    req = RemotingCommand.request(
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
        {
            "masterAddress": target["brokerAddr"],
            "masterEpoch": epoch,
            "masterBrokerId": 0,
            "masterHaAddress": target["haServerAddr"],
            "brokerRole": role.value,
            "brokerId": broker_id,
        },
    )
    try:
        resp = await client.invoke(addr, req, 30_000)
    except RemotingError as exc:
        raise FailoverError(f"role change of {addr} failed: {exc}") from exc
    if resp.code != ResponseCode.SUCCESS:
        raise FailoverError(f"{addr} refused the role change: {resp.remark}")
