"""A rejoining slave's reconciliation with its master (RocketMQ 5's truncation by epochs): ask
the master for its epochs (``GET_BROKER_EPOCH_CACHE``, 1007), find the last point both logs
agree on, truncate the commit log and consume queues above it (logged, and told to the node's
truncation listeners), adopt the master's epochs. So an old master that comes back loses only
its unreplicated tail, and never feeds it to anyone.

The failover (``broker/ha/failover.py``) and the HAClient (before it replicates) both use it.
"""

from __future__ import annotations

import logging

from broker.config import BrokerRole
from broker.ha.rejoin_cut import OnStep, rejoin_cut
from broker.node_parts import PeerLinks, TruncationListeners
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.epoch import EpochEntry, EpochFile, consistent_point
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts.errors import HaproofError, RemotingError
from contracts.fastjson import loads_fastjson

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS = 5000


class FailoverError(HaproofError):
    """A promotion or a rejoin could not be done; the message says which node and why."""


class EpochReconciler:
    """Reads a peer's epochs and cuts this node's log back to the point it shares with its
    master. ``client`` (made from ``links``: TLS, ACL signing) is this node's client to its
    peers, also used by the HAClient to introduce itself."""

    def __init__(
        self,
        store: MessageStore,
        role: BrokerRoleState,
        links: PeerLinks,
        node_name: str,
        truncations: TruncationListeners,
    ) -> None:
        self.store = store
        self.role = role
        self.node_name = node_name
        self.truncations = truncations
        self.client: RemotingClient = links.client()
        self.on_cut_step: OnStep | None = None  # the rejoin cut's fault hook (tests)
        # (master, its epochs) as the last reconcile read them: what this node adopted
        self.reconciled_with: tuple[str, list[EpochEntry]] | None = None

    async def close(self) -> None:
        await self.client.close()

    def truncate(self, to_offset: int, theirs: list | None = None) -> None:
        """Cut the commit log (and consume queues) back to ``to_offset``, crash-safe
        (``broker/ha/rejoin_cut.py``), tell the listeners, then take ``theirs`` epochs."""
        rejoin_cut(
            self.store,
            self.role,
            to_offset,
            theirs or [],
            self.truncations.notify,
            self.on_cut_step,
        )

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
        self.reconciled_with = None
        doc = await self.fetch_epochs(master_addr)
        if doc.get("brokerRole") not in {r.value for r in BrokerRole if r.is_master}:
            raise FailoverError(
                f"{master_addr} is not a master (it is {doc.get('brokerRole')}): "
                f"{self.node_name} will not cut its log to it"
            )
        theirs = EpochFile.from_json(doc.get("epochList") or [])
        mine = self.role.epoch_entries
        my_end = self.store.max_phy_offset
        point = None
        if mine and theirs and theirs[-1].epoch < mine[-1].epoch:
            raise FailoverError(
                f"{self.node_name} is at epoch {mine[-1].epoch}, master {master_addr} only at "
                f"{theirs[-1].epoch}: refusing to follow a stale master"
            )
        if mine and theirs:
            point = consistent_point(mine, my_end, theirs, int(doc["maxOffset"]))
            if point is None:
                raise FailoverError(
                    f"{self.node_name} shares no epoch with master {master_addr} "
                    f"(mine {mine}, theirs {theirs}): refusing to replicate"
                )
        if point is not None and point < my_end:
            log.warning(
                "%s: truncating the commit log [%d, %d) (%d bytes) to rejoin master %s",
                self.node_name,
                point,
                my_end,
                my_end - point,
                master_addr,
            )
            # durable before replication starts, finished by a restart (RocketMQ #10666)
            self.truncate(point, theirs)
            self.reconciled_with = (master_addr, theirs)
            return point
        if theirs:
            self.role.adopt_epochs(theirs)
            self.reconciled_with = (master_addr, theirs)
        return None

    async def still_reconciled(self, master_addr: str) -> bool:
        """Whether ``master_addr``'s epochs are still the ones the last reconcile adopted. A
        slave asks once its HA connection is open, before its first report: a master renewing
        its epoch closes every HA connection first, so on a connection made after this check
        every byte it sends is under these epochs; a renewal between the reconcile and the
        connection would otherwise feed this node the new epoch's bytes under the old epoch's
        entry, and a later rejoin would cut them although the master holds them (the
        simulation's seed 900075, ``needless_cuts``). Raises FailoverError when it cannot
        ask."""
        seen = self.reconciled_with
        if seen is None or seen[0] != master_addr:
            return False
        doc = await self.fetch_epochs(master_addr)
        return EpochFile.from_json(doc.get("epochList") or []) == seen[1]
