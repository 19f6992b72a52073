"""Failover: epochs, promotion, demotion and a rejoining node's truncation.

RocketMQ 4.x switches roles by hand; RocketMQ 5's controller mode adds epochs. We do what the
latter does with the former's wire:

- Every node keeps an epoch file (``broker/ha/epoch.py``). A node that starts as a master with
  none begins epoch 1 at its log end.
- ``NOTIFY_BROKER_ROLE_CHANGED`` (1008, RocketMQ 5's code) tells a node its group's master:
  ``masterAddress`` (remoting), ``masterEpoch``, ``masterHaAddress`` (ours), ``brokerRole`` (the
  master's role, ours) and ``brokerId`` (ours: the id a node that becomes a slave takes). The node
  named by ``masterAddress`` becomes master under ``masterEpoch`` — a new epoch entry at its log
  end, brokerId 0, HAService instead of HAClient, an immediate re-registration so the name server
  routes to it. Every other node becomes (or stays) its slave.
- Before a slave replicates from a master it asks for the master's epochs
  (``GET_BROKER_EPOCH_CACHE``, 1007), finds the last point both logs agree on, truncates its
  commit log and consume queues above it (logged, and told to ``node.truncate_listeners``),
  and adopts the master's epochs. So an old master that comes back loses only its unreplicated
  tail, and never feeds it to anyone.
- ``promote()`` is the controller the admin command and the tests drive.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from broker import planted_bugs
from broker.config import BrokerRole
from broker.ha.epoch import EpochFile, consistent_point
from broker.ha.role import RoleChange
from broker.ha.role_request import (
    RoleRequest,
    RoleRequestError,
    master_mismatch,
    parse_role_request,
)
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.config_store import topic_config
from contracts.errors import HaproofError, RemotingError
from contracts.fastjson import loads_fastjson

if TYPE_CHECKING:
    from broker.node import BrokerNode
    from broker.node_parts import PeerLinks

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS = 5000


class FailoverError(HaproofError):
    """A promotion or a rejoin could not be done; the message says which node and why."""


class UncleanPromotionError(FailoverError):
    """The node to promote is behind another reachable one (see ``promote``'s ``unclean``)."""


# -- node side -----------------------------------------------------------------------------------


class FailoverService:
    """A node service: answers 1007/1008, switches the node's role (through its role state,
    ``node.role``, and its role services, ``node.replication``), reconciles before replicating.
    ``links`` make this node's client to its peers (TLS, ACL signing)."""

    def __init__(self, node: BrokerNode, links: PeerLinks) -> None:
        self.node = node
        self.client = links.client()

    async def start(self) -> None:
        role = self.node.role
        if role.role.is_master and not role.epoch_entries:
            role.begin_epoch(1, self.node.store.max_phy_offset)

    async def stop(self) -> None:
        await self.client.close()

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
        ha = self.node.replication.ha
        if ha is not None:
            ha.peer_names[req.field("haClientAddr")] = req.field("nodeName")
        return req.make_response(ResponseCode.SUCCESS)

    def describe(self) -> dict:
        node, cfg = self.node, self.node.config
        end = node.store.max_phy_offset
        return {
            "clusterName": cfg.broker_cluster_name,
            "brokerName": cfg.broker_name,
            "brokerId": node.role.broker_id,
            "nodeName": node.node_name,
            "brokerRole": node.role.role.value,
            "brokerAddr": cfg.broker_addr,
            "haServerAddr": cfg.ha_server_addr,
            "maxOffset": end,
            "epoch": node.role.epoch,
            "epochList": node.role.epochs_json(end),
        }

    async def _epoch_cache(self, conn, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(self.describe()).encode())

    async def _ha_status(self, conn, req: RemotingCommand) -> RemotingCommand:
        doc = self.describe()
        doc.pop("epochList")
        ha = self.node.replication.ha
        if ha is not None:
            doc.update(ha.status())
            if str(req.opt_field("ackHistory", "false")).lower() == "true":
                # [monotonic s, best ack offset] each time the best slave ack rose
                doc["ackHistory"] = [list(e) for e in ha.ack_history]
        client = self.node.replication.ha_client
        if client is not None:
            doc.update(
                {"masterHaAddress": client.master_ha_addr, "masterConnected": client.connected}
            )
        doc.update(self.node.runtime_info())
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(doc).encode())

    async def _role_changed(self, conn, req: RemotingCommand) -> RemotingCommand:
        """Validated in full (broker/ha/role_request.py) before anything changes."""
        try:
            change = parse_role_request(req.ext_fields, self.node.role.broker_id)
            if change.master_addr != self.node.config.broker_addr:
                await self._check_master(change)
        except (RoleRequestError, FailoverError) as exc:
            log.error("refused a role change (nothing changed): %s", exc)
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        master_addr, epoch = change.master_addr, change.epoch
        try:
            if master_addr == self.node.config.broker_addr:
                await self.become_master(epoch, change.role)
            else:
                await self.become_slave(master_addr, change.master_ha_addr, change.broker_id)
        except (HaproofError, ValueError) as exc:
            log.error("role change to master %s (epoch %d) failed: %s", master_addr, epoch, exc)
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        return req.make_response(
            ResponseCode.SUCCESS,
            ext_fields={"epoch": self.node.role.epoch, "maxOffset": self.node.store.max_phy_offset},
        )

    async def _check_master(self, change: RoleRequest) -> None:
        """The node named as the new master must say so itself, before this one follows it."""
        if change.broker_id <= 0:
            raise FailoverError(f"a slave needs a brokerId > 0, not {change.broker_id}")
        doc = await self.fetch_epochs(change.master_addr)
        problem = master_mismatch(doc, change, self.node.config.broker_name)
        if problem is not None:
            raise FailoverError(problem)

    async def become_master(self, epoch: int, role: BrokerRole) -> None:
        node, state = self.node, self.node.role
        if not role.is_master:
            raise FailoverError(f"a master cannot take role {role.value}")
        if state.role.is_master and epoch == state.epoch:
            return  # already done (a retried request)
        if epoch <= state.epoch:
            raise FailoverError(f"epoch {epoch} is not newer than this node's epoch {state.epoch}")
        await node.replication.stop()
        # A slave's tail can be part of a record (HA frames split records and the master died
        # mid-record): the new epoch starts after the last whole record, never after half one.
        whole = node.store.dispatcher.dispatched_offset
        torn_end = node.store.max_phy_offset
        if whole < torn_end:
            log.warning(
                "%s: dropping a torn record tail [%d, %d) before becoming master",
                node.node_name, whole, torn_end,
            )  # fmt: skip
            node.store.truncate_dirty(whole)
            node.notify_truncated(torn_end, whole)
        self._adopt_orphan_topics()
        start = node.store.max_phy_offset
        state.begin_epoch(epoch, start)
        change = state.change(role, 0)
        await node.replication.start()
        node.request_register()
        log.warning(
            "%s is now %s of %s under epoch %d from offset %d",
            node.node_name, role.value, node.config.broker_name, epoch, start,
        )  # fmt: skip
        state.announce(change)

    def _adopt_orphan_topics(self) -> None:
        """A slave promoted before SlaveSynchronize copied a new topic's config holds the
        topic's messages and queues but no config: create one, or pulls would answer
        TOPIC_NOT_EXIST for acknowledged messages."""
        store = self.node.store
        queues: dict[str, int] = {}
        for topic, qid in list(store.queues):
            queues[topic] = max(queues.get(topic, 0), qid + 1)
        for topic, n in sorted(queues.items()):
            if topic not in store.topic_config.table:
                store.topic_config.put(topic, topic_config(topic, n))
                log.warning("%s: topic %s had queues but no config: created with %d queues",
                            self.node.node_name, topic, n)  # fmt: skip
        store.topic_config.persist()

    async def become_slave(self, master_addr: str, master_ha_addr: str | None, broker_id: int):
        node = self.node
        if broker_id <= 0:
            raise FailoverError(f"a slave needs a brokerId > 0, not {broker_id}")
        await node.replication.stop()
        change = node.role.change(BrokerRole.SLAVE, broker_id, master_ha_addr=master_ha_addr)
        try:
            await self.reconcile(master_addr)
        except HaproofError:
            # the master cannot be asked now: follow it anyway (the HA client reconciles before
            # it replicates, and retries), never a slave that follows nobody
            await self._follow(master_addr, master_ha_addr)
            raise
        await self._follow(master_addr, master_ha_addr)
        if change.old is not BrokerRole.SLAVE:
            log.warning("%s is now a slave of %s", node.node_name, master_addr)
            node.role.announce(RoleChange(change.old, change.new, node.role.epoch))

    async def _follow(self, master_addr: str, master_ha_addr: str | None) -> None:
        node = self.node
        await node.replication.start()
        client = node.replication.ha_client
        if client is not None:
            client.set_master(master_ha_addr, master_addr)
        node.request_register()

    async def fetch_epochs(self, broker_addr: str) -> dict:
        req = RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE)
        try:
            resp = await self.client.invoke(broker_addr, req, REQUEST_TIMEOUT_MS)
        except RemotingError as exc:
            raise FailoverError(f"cannot read the epochs of {broker_addr}: {exc}") from exc
        if resp.code != ResponseCode.SUCCESS:
            raise FailoverError(f"{broker_addr} refused GET_BROKER_EPOCH_CACHE: {resp.remark}")
        try:
            doc = loads_fastjson(resp.body)
        except ValueError as exc:
            raise FailoverError(f"{broker_addr} answered epochs that are not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise FailoverError(f"{broker_addr} answered epochs that are not a JSON object")
        return doc

    async def reconcile(self, master_addr: str) -> int | None:
        """Truncate this (slave) node's log to the last point it shares with the master, then
        take the master's epochs. Returns the truncation point, or None when nothing was cut."""
        node = self.node
        doc = await self.fetch_epochs(master_addr)
        if doc.get("brokerRole") not in {r.value for r in BrokerRole if r.is_master}:
            raise FailoverError(
                f"{master_addr} is not a master (it is {doc.get('brokerRole')}): "
                f"{node.node_name} will not cut its log to it"
            )
        theirs = EpochFile.from_json(doc.get("epochList") or [])
        mine = node.role.epoch_entries
        my_end = node.store.max_phy_offset
        point = None
        if mine and theirs and theirs[-1].epoch < mine[-1].epoch:
            raise FailoverError(
                f"{node.node_name} is at epoch {mine[-1].epoch}, master {master_addr} only at "
                f"{theirs[-1].epoch}: refusing to follow a stale master"
            )
        if mine and theirs:
            point = consistent_point(mine, my_end, theirs, int(doc["maxOffset"]))
            if point is None:
                raise FailoverError(
                    f"{node.node_name} shares no epoch with master {master_addr} "
                    f"(mine {mine}, theirs {theirs}): refusing to replicate"
                )
        cut = None
        if point is not None and point < my_end:
            log.warning(
                "%s: truncating the commit log [%d, %d) (%d bytes) to rejoin master %s",
                node.node_name, point, my_end, my_end - point, master_addr,
            )  # fmt: skip
            node.store.truncate_dirty(point)
            node.notify_truncated(my_end, point)
            cut = point
        if theirs:
            node.role.adopt_epochs(theirs)
        return cut


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

    A node behind another reachable one (by last epoch, then log end) is refused: the bytes
    only the others hold, acknowledged ones included, would be cut when they follow it.
    ``unclean`` (RocketMQ's enableElectUncleanMaster, ``--unclean``) promotes it anyway."""
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
            _refuse_unclean(target, nodes)
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


def _rank(doc: dict) -> tuple[int, int]:
    return int(doc.get("epoch", 0)), int(doc.get("maxOffset", 0))


def _refuse_unclean(target: dict, nodes: dict[str, dict]) -> None:
    """Refuse to promote ``target`` when a reachable node is ahead of it."""
    if planted_bugs.active("unclean-election"):
        return  # the planted bug: any named node is promoted
    ahead = [d for d in nodes.values() if _rank(d) > _rank(target)]
    if ahead:
        best = max(ahead, key=_rank)
        raise UncleanPromotionError(
            f"node {target['nodeName']} (epoch {_rank(target)[0]}, log end {_rank(target)[1]}) "
            f"is behind {best['nodeName']} (epoch {_rank(best)[0]}, log end {_rank(best)[1]}): "
            "promoting it would cut what only the others hold; promote the node ahead, or "
            "pass --unclean to accept that loss"
        )


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
