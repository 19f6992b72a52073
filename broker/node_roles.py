"""What runs only in the node's current role, built afresh at every role change: HAService on
a master, HAClient and SlaveSynchronize on a slave (RocketMQ's changeSpecialServiceStatus).
``RoleServices`` (``broker/ha/role_services.py``) holds what runs; this factory builds it from
the node's parts, handed in once."""

from __future__ import annotations

from broker.acl.permission import AclChecker
from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import BrokerRole
from broker.ha.client import HAClient
from broker.ha.confirm_watch import ConfirmWatch
from broker.ha.reconcile import EpochReconciler
from broker.ha.service import HAService
from broker.ha.slave_sync import SlaveSynchronize
from broker.ha.sync_state_keeper import SyncStateKeeper
from broker.live_config import LiveConfig
from broker.node_parts import PeerLinks
from broker.node_service import NodeService
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState


class RoleServiceFactory:
    def __init__(
        self,
        store: MessageStore,
        config: LiveConfig,
        role: BrokerRoleState,
        reconciler: EpochReconciler,
        links: PeerLinks,
        *,
        host: str,
        acl: AclChecker | None,
        node_name: str,
        clock: Clock = SYSTEM_CLOCK,
        confirm_watch: ConfirmWatch | None = None,
    ) -> None:
        self.store = store
        # one across the node's masters: told as the confirmOffset may move (the offset log)
        self.confirm_watch = confirm_watch or ConfirmWatch()
        self.config = config
        self.role = role
        self.reconciler = reconciler
        self.links = links
        self.host = host
        self.acl = acl
        self.node_name = node_name
        self.clock = clock
        # controller mode: the master's SyncStateSet, one keeper across the node's terms
        self.sync_state = (
            SyncStateKeeper(config, node_name, clock, read_gate=store.queries.set_read_end)
            if config.enable_controller_mode
            else None
        )

    def build(self, role: BrokerRole) -> list[NodeService]:
        """What runs only in ``role``."""
        ha_tls = self.links.ha_tls  # tlsMode=enforcing: the HA stream over TLS too
        if role.is_master:
            ha = HAService(
                self.store,
                self.config,
                self.role,
                self.host,
                self.acl,
                clock=self.clock,
                sync_state=self.sync_state,
                ssl_context=ha_tls.server if ha_tls else None,
                confirm_watch=self.confirm_watch,
            )
            return [ha]
        client = HAClient(
            self.store,
            self.config,
            self.role,
            node_name=self.node_name,
            namesrv_addrs=self.config.namesrv_addrs,
            reconciler=self.reconciler,
            signer=self.links.signer,
            clock=self.clock,
            ssl_context=ha_tls.client if ha_tls else None,
        )
        sync = SlaveSynchronize(
            self.store, self.config, self.links, client.known_master, clock=self.clock
        )
        return [client, sync]
