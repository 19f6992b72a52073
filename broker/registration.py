"""A broker node's name server registration (RocketMQ's BrokerOuterAPI registerBrokerAll /
unregisterBrokerAll): every ``REGISTER_INTERVAL_MS``, at once when asked (a role or topic
change), and an unregistration at shutdown. A slave learns its master from the answers."""

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
        self._loop = Periodic(
            "namesrv-registration",
            period_ms=REGISTER_INTERVAL_MS,
            round_=self._register_round,
            clock=clock,
            run_first_round_at_once=True,
            stop_timeout_ms=0,
        )

    def request(self) -> None:
        """Register with the name servers now (after a role or topic change)."""
        self._loop.wakeup()

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _register_round(self) -> None:
        await self.register_all()

    def _register_request(self) -> RemotingCommand:
        body = {
            "topicConfigSerializeWrapper": self.store.topic_config.to_json(),
            "filterServerList": [],
        }
        cfg = self.config
        return RemotingCommand.request(
            RequestCode.REGISTER_BROKER,
            {
                "brokerName": cfg.broker_name,
                "brokerAddr": cfg.broker_addr,
                "clusterName": cfg.broker_cluster_name,
                "haServerAddr": cfg.ha_server_addr,
                "brokerId": self.role.broker_id,
                "compressed": False,
            },
            json.dumps(body).encode(),
        )

    async def register_all(self) -> int:
        """Register with every name server; returns how many accepted."""
        ok = 0
        for addr in self.config.namesrv_addrs:
            try:
                resp = await self.client.invoke(addr, self._register_request(), REGISTER_TIMEOUT_MS)
            except RemotingError as exc:
                log.warning("register with name server %s failed: %s", addr, exc)
                continue
            if resp.code == ResponseCode.SUCCESS:
                ok += 1
                self._learn_master(resp.ext_fields)
            else:
                log.warning("name server %s refused registration: %s", addr, resp.remark)
        return ok

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
