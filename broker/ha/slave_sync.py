"""SlaveSynchronize: a slave copies its master's metadata every ``slaveSyncIntervalMs``.

Topics (GET_ALL_TOPIC_CONFIG, 21), consumer offsets (GET_ALL_CONSUMER_OFFSET, 43), delay offsets
(GET_ALL_DELAY_OFFSET, 45) and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201), as
RocketMQ 4.x's SlaveSynchronize does, from the master's remoting address (learned when the slave
registers with the name server). Each table is persisted after it is copied, so a slave promoted
after its master died serves the topics and offsets it last saw.

Consumer offsets merge forward-only: a copied offset never moves a slave's committed offset
backwards (RocketMQ issue #1094); an admin reset reaches a slave as an explicit reset.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import BrokerConfig
from broker.loop_service import Periodic
from broker.node_parts import PeerLinks
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from contracts.errors import RemotingError

log = logging.getLogger(__name__)

TIMEOUT_MS = 5000


class SlaveSynchronize:
    """A slave's node service; ``sync_all()`` does one round (tests call it directly).
    ``master_addr()`` is the master's remoting address when known (the HAClient learns it)."""

    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        links: PeerLinks,
        master_addr: Callable[[], str | None],
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.config = config
        self.client = links.client()  # tlsEnable, ACL signing
        self._master = master_addr
        self.rounds = 0  # completed rounds
        self._loop = Periodic(
            "slave-sync",
            period_ms=config.slave_sync_interval_ms,
            round_=self._round,
            clock=clock,
            stop_timeout_ms=0,
        )

    async def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await self.client.close()

    def handlers(self) -> dict:
        return {}

    def runtime_info(self) -> dict[str, object]:
        return {}

    async def _round(self) -> None:
        try:
            await self.sync_all()
        except RemotingError as exc:
            log.info("slave sync: master unreachable: %s", exc)

    async def _fetch(self, addr: str, code: RequestCode) -> dict:
        resp = await self.client.invoke(addr, RemotingCommand.request(code), TIMEOUT_MS)
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingError(f"{addr} refused request {code.name}: {resp.remark}")
        return json.loads(resp.body)

    async def sync_all(self) -> bool:
        addr = self._master()
        if addr is None:
            return False
        store = self.store
        topics = await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        try:
            store.topic_config.replace_from_master(topics)
        except ValueError as exc:
            raise RemotingError(f"{addr}: answer unusable: {exc}") from exc
        offsets = await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        try:
            store.consumer_offsets.merge_forward(offsets, f"master {addr}")
        except ValueError as exc:
            raise RemotingError(f"{addr}: GET_ALL_CONSUMER_OFFSET answer unusable: {exc}") from exc
        store.consumer_offsets.persist_if_changed()
        delay = await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        try:
            delay_rose = store.delay_offsets.merge_forward(delay)
        except ValueError as exc:
            raise RemotingError(f"{addr}: GET_ALL_DELAY_OFFSET answer unusable: {exc}") from exc
        if delay_rose:
            store.delay_offsets.persist()
        groups = await self._fetch(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        try:
            store.subscription_groups.replace_from_master(groups)
        except ValueError as exc:
            raise RemotingError(f"{addr}: answer unusable: {exc}") from exc
        self.rounds += 1
        return True
