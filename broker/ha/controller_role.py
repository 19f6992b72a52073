"""Controller mode on the node (``enableControllerMode=true``): the role owner the
``ControllerClient`` drives (``ControllerRole``: become master or slave through the node's
``FailoverService``, fence writes through its ``WriteGate``), the offsets it reports, and the
node service that runs the client (``ControllerModeService``).

The node starts as a slave that follows nobody and takes no writes until the controller has
applied a first role (``initial_role``, the ``unassigned`` reason on the gate). The master role
it takes when elected is the configured ``brokerRole`` when that is a master role, else
SYNC_MASTER. NOTIFY_BROKER_ROLE_CHANGED (1008) is taken only as a hint: the node then asks the
controller leader itself (the role it applies always comes from a controller's answer, never
from whoever sent the request)."""

from __future__ import annotations

import logging

from broker.clock import Clock
from broker.config import BrokerConfig, BrokerRole
from broker.ha.broker_identity import BrokerIdentityStore
from broker.ha.controller_client import ClientConfig, ControllerClient
from broker.ha.failover import FailoverService
from broker.ha.reconcile import EpochReconciler
from broker.ha.role_services import RoleServices
from broker.loop_service import Periodic
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.epoch import EpochFile
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from broker.write_gate import WriteGate

log = logging.getLogger(__name__)

UNASSIGNED = "unassigned"
LEASE = "lease"
LEASE_WATCH_STEPS = 20  # the lease is checked every 1/20 of it (5 % late at most)


def initial_role(config: BrokerConfig, epochs: EpochFile) -> BrokerRoleState:
    """What the node is at start: broker.conf's role, or in controller mode a slave of nobody
    (id: the one the controller gave it before, if any) until the controller says."""
    if not config.enable_controller_mode:
        return BrokerRoleState.configured(config, epochs)
    ident = BrokerIdentityStore(
        config.store_path_root_dir, config.broker_cluster_name, config.broker_name
    ).state()[1]
    broker_id = ident.brokerId if ident is not None and ident.brokerId > 0 else 1
    return BrokerRoleState(BrokerRole.SLAVE, broker_id, epochs, None)


def write_gate(config: BrokerConfig) -> WriteGate:
    """The node's gate: closed until a first role in controller mode, else open."""
    gate = WriteGate()
    if config.enable_controller_mode:
        gate.close(UNASSIGNED, "no role from the controller yet")
    return gate


def controller_mode(
    config: BrokerConfig,
    owner: tuple[FailoverService, BrokerRoleState, EpochReconciler, WriteGate, RoleServices],
    store: MessageStore,
    client: RemotingClient,
    clock: Clock,
) -> ControllerModeService:
    """The node service of controller mode, over the node's failover, role state, reconciler,
    write gate and role services (``owner``)."""
    failover, role, reconciler, gate, replication = owner
    master = config.broker_role if config.broker_role.is_master else BrokerRole.SYNC_MASTER
    role_owner = ControllerRole(failover, role, reconciler, gate, master)
    return ControllerModeService(config, role_owner, NodeOffsets(store, replication), client, clock)


class ControllerRole:
    """The ``RoleOwner`` of ``broker/ha/controller_client.py`` over the node's failover."""

    def __init__(
        self,
        failover: FailoverService,
        role: BrokerRoleState,
        reconciler: EpochReconciler,
        gate: WriteGate,
        master_role: BrokerRole,
    ) -> None:
        self.failover, self.role, self.reconciler = failover, role, reconciler
        self.gate, self.master_role = gate, master_role

    def master_epoch(self) -> int:
        return self.role.epoch

    async def become_master(
        self,
        *,
        broker_id: int,
        master_epoch: int,
        sync_state_set: set[int],
        sync_state_set_epoch: int,
    ) -> None:
        await self.failover.become_master(master_epoch, self.master_role)
        self.gate.open(UNASSIGNED)
        log.warning(
            "controller: master (controller id %d, epoch %d, SyncStateSet %s)",
            broker_id,
            master_epoch,
            sorted(sync_state_set),
        )

    async def become_slave(
        self, *, broker_id: int, master_epoch: int, master_broker_id: int, master_addr: str
    ) -> None:
        doc = await self.reconciler.fetch_epochs(master_addr)  # raises: retried at the next pull
        await self.failover.become_slave(master_addr, doc.get("haServerAddr"), broker_id)
        self.gate.open(UNASSIGNED)

    def fence_writes(self, reason: str) -> None:
        log.error("controller: writes refused: %s", reason)
        self.gate.close(LEASE, reason)

    def unfence_writes(self) -> None:
        self.gate.open(LEASE)


class NodeOffsets:
    """What the heartbeats report: the log end, and the HA confirm offset (a slave: its end)."""

    def __init__(self, store: MessageStore, replication: RoleServices) -> None:
        self.store, self.replication = store, replication

    def max_offset(self) -> int:
        return self.store.max_phy_offset

    def confirm_offset(self) -> int:
        ha = self.replication.ha
        if ha is None:
            return self.store.max_phy_offset
        return int(ha.status()["confirmOffset"])


class ControllerModeService:
    """A node service running the ``ControllerClient`` (started after the store recovered and
    the failover finished any interrupted rejoin cut) and taking 1008 as a hint."""

    def __init__(
        self,
        config: BrokerConfig,
        role_owner: ControllerRole,
        offsets: NodeOffsets,
        client: RemotingClient,
        clock: Clock,
    ) -> None:
        cfg = ClientConfig(
            cluster=config.broker_cluster_name,
            broker_name=config.broker_name,
            broker_addr=config.broker_addr,
            controller_addrs=tuple(config.controller_addrs),
            heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
            heartbeat_timeout_ms=config.controller_heartbeat_timeout_ms,
            lease_ms=config.controller_lease_ms,
            sync_metadata_period_ms=config.sync_broker_metadata_period_ms,
            election_priority=config.broker_election_priority,
        )
        identity = BrokerIdentityStore(
            config.store_path_root_dir, config.broker_cluster_name, config.broker_name
        )
        self.remoting, self.replication = client, offsets.replication
        self.client = ControllerClient(
            cfg, identity, client.invoke, role_owner, offsets, clock, on_event=_log_event
        )
        self.keeper = Periodic(
            "sync-state-set",
            period_ms=config.broker_heartbeat_interval_ms,
            round_=self.keep_sync_state_set,
            clock=clock,
        )
        # the lease ends on time even while the client's round waits on the network
        self.lease_watch = Periodic(
            "master-lease",
            period_ms=max(10, config.controller_lease_ms // LEASE_WATCH_STEPS),
            round_=self._watch_lease,
            clock=clock,
        )

    async def start(self) -> None:
        self.client.start()
        self.keeper.start()
        self.lease_watch.start()

    async def stop(self) -> None:
        await self.lease_watch.stop()
        await self.keeper.stop()
        await self.client.stop()
        await self.remoting.close()

    async def _watch_lease(self) -> None:
        self.client.check_lease()

    async def keep_sync_state_set(self) -> None:
        """A master proposes its SyncStateSet (1001): itself and the slaves whose HA
        connection is in sync (within haSlaveFallbehindMax, connected); a slave not in the set
        joins only once it acknowledged what every member did (a lagging slave let in would be
        electable without bytes acknowledged by all the others: found by the simulation). A
        first, coarse upkeep: ``broker/ha/sync_state.py``'s RocketMQ rules are not wired yet."""
        client, ha = self.client, self.replication.ha
        if not client.is_master or ha is None or client.broker_id is None:
            return
        current, status = client.replica.sync_state_set, ha.status()
        slaves = [s for s in status["slaves"] if s["inSync"] and s["brokerId"]]
        members = [s["ackOffset"] for s in slaves if s["brokerId"] in current]
        floor = min(members) if members else status["masterMaxOffset"]
        ids = {s["brokerId"] for s in slaves if s["brokerId"] in current or s["ackOffset"] >= floor}
        wanted = frozenset({client.broker_id, *ids})
        if wanted != current:
            if await client.alter_sync_state_set(set(wanted)):
                log.warning("controller: SyncStateSet now %s", sorted(wanted))

    def handlers(self) -> dict:
        return {RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self._notified}

    def runtime_info(self) -> dict[str, object]:
        c = self.client
        return {
            "controllerLeader": c.leader or "",
            "controllerBrokerId": -1 if c.broker_id is None else c.broker_id,
            "controllerMasterEpoch": c.replica.master_epoch,
            "controllerFenced": c.fenced,
        }

    async def _notified(self, conn, req: RemotingCommand) -> RemotingCommand | None:
        """A hint only: ask the controller leader now (the next round pulls at once)."""
        self.client.pull_now()
        if req.is_oneway:
            return None
        return req.make_response(ResponseCode.SUCCESS)


def _log_event(kind: str, fields: dict) -> None:
    log.warning("controller event %s: %s", kind, fields)
