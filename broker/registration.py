"""A broker node's name server registration (RocketMQ's BrokerOuterAPI registerBrokerAll /
unregisterBrokerAll, BrokerController.registerIncrementBrokerData): the whole topic table
every ``REGISTER_INTERVAL_MS`` and at once when asked (``request``: a role change, an admin's
topic change), only the topics changed since what each name server acknowledged when topics
were created (``topics_changed``: a send's auto-creation, a retry topic), and an
unregistration at shutdown. Every registration carries the table's dataVersion: a name server
skips a whole table whose dataVersion it holds (``broker/namesrv_routes.py``). A slave learns
its master from the answers."""

from __future__ import annotations

import json
import logging

from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import BrokerConfig
from broker.ha.role_services import RoleServices
from broker.live_config import LiveConfig
from broker.loop_service import Periodic
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts.errors import RemotingError

log = logging.getLogger(__name__)

REGISTER_INTERVAL_MS = 30_000
REGISTER_TIMEOUT_MS = 3000


class NamesrvRegistration:
    """Registers what the node is now (``role``: broker id) with the topics of ``store``;
    ``config`` is read at each registration (its addresses and names). ``start()`` runs the
    periodic registration on ``clock`` (the first round at once), ``request()`` wakes it."""

    def __init__(
        self,
        config: BrokerConfig | LiveConfig,
        store: MessageStore,
        role: BrokerRoleState,
        replication: RoleServices,
        client: RemotingClient,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.store = store
        self.role = role
        self.replication = replication
        self.client = client
        self._clock = clock
        # name server -> the dataVersion of the topics it acknowledged (None: unknown)
        self._acked: dict[str, dict | None] = {}
        self._full_wanted = True
        self._last_full_ms: float | None = None
        self._loop = Periodic(
            "namesrv-registration",
            period_ms=REGISTER_INTERVAL_MS,
            round_=self._register_round,
            clock=clock,
            run_first_round_at_once=True,
            stop_timeout_ms=0,
        )

    def request(self) -> None:
        """Register the whole table with the name servers now (a role or topic change)."""
        self._full_wanted = True
        self._loop.wakeup()

    def topics_changed(self) -> None:
        """Register the topics changed since each name server's last answer, now."""
        self._loop.wakeup()

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _register_round(self) -> None:
        now = self._clock.monotonic_ms()
        due = self._last_full_ms is None or now - self._last_full_ms >= REGISTER_INTERVAL_MS
        if self._full_wanted or due:
            self._full_wanted = False
            self._last_full_ms = now
            await self.register_all()
        else:
            await self.register_changes()

    def _register_request(self, body: bytes = b"", *, incremental: bool = False) -> RemotingCommand:
        cfg = self.config
        fields = {
            "brokerName": cfg.broker_name,
            "brokerAddr": cfg.broker_addr,
            "clusterName": cfg.broker_cluster_name,
            "haServerAddr": cfg.ha_server_addr,
            "brokerId": self.role.broker_id,
            "compressed": False,
        }
        if incremental:
            fields["incremental"] = True  # not RocketMQ's: a name server may ask for the table
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body)

    async def register_changes(self) -> int:
        """To each name server, the topics created or replaced since the dataVersion it
        acknowledged (the whole table when that cannot be said); returns how many accepted."""
        topics = self.store.topic_config
        version = topics.data_version
        ok = 0
        for addr in self.config.namesrv_addrs:
            changed = topics.changed_since(self._acked.get(addr))
            if changed == []:
                continue
            if changed is None:
                wrapper, incremental = topics.to_json(), False
            else:
                table = {t: tc for t in changed if (tc := topics.get(t)) is not None}
                wrapper, incremental = {"topicConfigTable": table, "dataVersion": version}, True
            req = self._register_request(_body(wrapper), incremental=incremental)
            ok += await self._register_with(addr, req, version)
        return ok

    async def register_all(self) -> int:
        """Register the whole table with every name server; returns how many accepted."""
        wrapper = self.store.topic_config.to_json()
        body = _body(wrapper)  # once: a request (signed, an opaque) for each name server
        ok = 0
        for addr in self.config.namesrv_addrs:
            req = self._register_request(body)
            ok += await self._register_with(addr, req, wrapper["dataVersion"])
        return ok

    async def _register_with(self, addr: str, req: RemotingCommand, version: dict) -> int:
        try:
            resp = await self.client.invoke(addr, req, REGISTER_TIMEOUT_MS)
        except RemotingError as exc:
            log.warning("register with name server %s failed: %s", addr, exc)
            return 0
        if resp.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused registration: %s", addr, resp.remark)
            return 0
        self._learn_master(resp.ext_fields)
        if str(resp.ext_fields.get("registerFull", "")).lower() == "true":
            log.info("name server %s does not hold this broker's table: registering it", addr)
            self._acked[addr] = None
            self.request()
        else:
            self._acked[addr] = version
        return 1

    def _learn_master(self, fields: dict) -> None:
        """A slave learns its master from the registration answer (masterAddr, haServerAddr);
        a master HA address the node was given (haMasterAddress, a failover) wins, as
        RocketMQ's updateMasterHAServerAddrPeriodically is off by default."""
        client = self.replication.ha_client
        if client is None:
            return
        ha_addr = None if self.role.master_ha_addr else fields.get("haServerAddr") or None
        client.set_master(ha_addr, fields.get("masterAddr") or None)

    async def unregister_all(self) -> None:
        for addr in self.config.namesrv_addrs:
            req = RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER,
                {
                    "brokerName": self.config.broker_name,
                    "brokerAddr": self.config.broker_addr,
                    "clusterName": self.config.broker_cluster_name,
                    "brokerId": self.role.broker_id,
                },
            )
            try:
                await self.client.invoke(addr, req, REGISTER_TIMEOUT_MS)
            except RemotingError as exc:
                log.info("unregister from name server %s failed: %s", addr, exc)


def _body(wrapper: dict) -> bytes:
    """RegisterBrokerBody: the topics (TopicConfigSerializeWrapper) and no filter servers."""
    return json.dumps({"topicConfigSerializeWrapper": wrapper, "filterServerList": []}).encode()
