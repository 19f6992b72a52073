"""Reverse offset sync: a master takes its group's larger committed offsets before serving.

While a master is down, consumers commit on its slave; the slave also keeps copying the master's
table forward-only (broker/ha/slave_sync.py). When the master comes back with an older
``consumerOffset.json`` it must not serve (nor hand to its slaves) offsets older than the ones
consumers already committed — RocketMQ issue #1094. RocketMQ 5's BrokerPreOnlineService does the
same before a returning master goes online; here:

- at start, on a master, before the node registers and opens its port, and again when a node is
  promoted to master: list the group's other nodes on the name servers (GET_BROKER_CLUSTER_INFO),
  read each one's consumer and delay offsets (GET_ALL_CONSUMER_OFFSET 43, GET_ALL_DELAY_OFFSET 45)
  and keep the larger of its own and theirs, then persist;
- a peer that does not answer within ``PEER_TIMEOUT_MS`` is skipped with a warning (a master
  whose slaves are all gone must still start).

Every raised offset is logged (group, topic, queue, from, to); ``runtime_info`` reports how many.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from broker.config import BrokerConfig
from broker.node_parts import PeerLinks
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.consumer_offsets import ConsumerOffsetManager, Raised
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts.errors import HaproofError, RemotingError

log = logging.getLogger(__name__)

PEER_TIMEOUT_MS = 3000

__all__ = ["OffsetPreOnline", "Raised", "merge_consumer_offsets"]


def merge_consumer_offsets(
    offsets: ConsumerOffsetManager, doc: dict, source: str = "<peer>"
) -> list[Raised]:
    """A peer's ``GET_ALL_CONSUMER_OFFSET`` document, forward-only (the manager's
    :meth:`~ConsumerOffsetManager.merge_forward`); ValueError names a malformed entry."""
    return offsets.merge_forward(doc, source)


Fetch = Callable[[str, RequestCode], Awaitable[dict]]


class OffsetPreOnline:
    """A node service: reverse offset sync on a master at start and after a promotion.
    ``fetch`` / ``peers`` replace the remote calls (tests); ``links`` make the client."""

    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        role: BrokerRoleState,
        links: PeerLinks,
        *,
        fetch: Fetch | None = None,
        peers: Callable[[], Awaitable[list[str]]] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.role = role
        self.client = links.client()  # tlsEnable, ACL signing
        self._fetch = fetch or self._fetch_remote
        self._peers = peers or self._peers_from_namesrv
        self.raised_total = 0
        self.peers_read = 0
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self.role.listeners.append(self._on_role_changed)
        if self.role.role.is_master:
            await self.sync_from_peers()

    async def stop(self) -> None:
        if self._on_role_changed in self.role.listeners:
            self.role.listeners.remove(self._on_role_changed)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.close()

    def handlers(self) -> dict:
        return {}

    def runtime_info(self) -> dict:
        return {"offsetPreOnlineRaised": self.raised_total, "offsetPreOnlinePeers": self.peers_read}

    def _on_role_changed(self, old_role, new_role, epoch: int) -> None:
        if new_role.is_master and not old_role.is_master:
            task = asyncio.get_running_loop().create_task(self.sync_from_peers())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _peers_from_namesrv(self) -> list[str]:
        from broker.ha.failover import group_nodes

        cfg = self.config
        if not cfg.namesrv_addrs:
            return []
        addrs = await group_nodes(self.client, cfg.namesrv_addrs, cfg.broker_name)
        return [a for a in addrs if a != cfg.broker_addr]

    async def _fetch_remote(self, addr: str, code: RequestCode) -> dict:
        resp = await self.client.invoke(addr, RemotingCommand.request(code), PEER_TIMEOUT_MS)
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingError(f"{addr} refused {code.name}: {resp.remark}")
        return json.loads(resp.body)

    async def sync_from_peers(self) -> list[Raised]:
        """One reverse sync; returns the raised offsets. Never raises for a peer's failure."""
        store = self.store
        try:
            peers = await self._peers()
        except HaproofError as exc:
            log.info("offset pre-online sync: cannot list the group's nodes: %s", exc)
            return []
        raised: list[Raised] = []
        delay_rose = 0
        for addr in peers:
            try:
                offsets = await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
                delays = await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET)
                got = merge_consumer_offsets(store.consumer_offsets, offsets, addr)
                delay_rose += store.delay_offsets.merge_forward(delays)
            except (HaproofError, ValueError) as exc:
                log.warning("offset pre-online sync: skipping %s: %s", addr, exc)
                continue
            self.peers_read += 1
            for group, topic, qid, before, after in got:
                log.warning(
                    "offset pre-online sync: %s %s/%d raised %d -> %d from %s",
                    group,
                    topic,
                    qid,
                    before,
                    after,
                    addr,
                )
            raised += got
        if raised:
            store.consumer_offsets.persist()
        if delay_rose:
            store.delay_offsets.persist()
        self.raised_total += len(raised)
        log.info(
            "offset pre-online sync: read %d peer(s) of %s, raised %d offset(s)",
            len(peers),
            self.config.broker_name,
            len(raised),
        )
        return raised
