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
from broker.ha.sync_state_keeper import Emit, SyncStateKeeper
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
NO_ACK = "no heartbeat acknowledged by the controller leader"


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
    on_event: Emit | None = None,
) -> ControllerModeService:
    """The node service of controller mode, over the node's failover, role state, reconciler,
    write gate and role services (``owner``); ``on_event`` archives what it records
    (``lease_lost``, ``sync_state_set_changed``; None: logged only)."""
    failover, role, reconciler, gate, replication = owner
    master = config.broker_role if config.broker_role.is_master else BrokerRole.SYNC_MASTER
    role_owner = ControllerRole(failover, role, reconciler, gate, master)
    role_owner.sync_state, role_owner.store = replication.sync_state, store
    offsets = NodeOffsets(store, replication)
    return ControllerModeService(config, role_owner, offsets, client, clock, on_event)


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
        self.sync_state: SyncStateKeeper | None = None  # the master's SyncStateSet
        self.store: MessageStore | None = None  # where this master's epoch starts

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
        if self.sync_state is not None and self.store is not None:  # before writes come in
            start = self.store.max_phy_offset
            self.sync_state.begin(
                broker_id, sync_state_set, master_epoch, sync_state_set_epoch, start
            )
        self.gate.open(UNASSIGNED)
        self.gate.restate(LEASE, f"master of epoch {master_epoch} without a lease yet: {NO_ACK}")
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
        if self.sync_state is not None:
            self.sync_state.end()
        await self.failover.become_slave(master_addr, doc.get("haServerAddr"), broker_id)
        self.gate.open(UNASSIGNED)
        # fenced as a master (the client unfences only a master whose lease is renewed): say
        # what is true now, not the lease of a role it no longer has
        self.gate.restate(
            LEASE,
            f"not the master any more: a slave of brokerId {master_broker_id} since master "
            f"epoch {master_epoch} (this node's master lease had ended)",
        )

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
        on_event: Emit | None = None,
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
        self._archive = on_event
        self.client = ControllerClient(
            cfg, identity, client.invoke, role_owner, offsets, clock, on_event=self.record
        )
        self.keeper = role_owner.sync_state  # None only where no node runs (unit tests)
        if self.keeper is not None:
            self.keeper.connect(self._alter, self._view)
            self.keeper.on_event = self.record

    async def start(self) -> None:
        self.client.start()
        if self.keeper is not None:
            self.keeper.start()

    async def stop(self) -> None:
        if self.keeper is not None:
            await self.keeper.stop()
        await self.client.stop()
        await self.remoting.close()

    async def _alter(self, members: frozenset[int]) -> int | None:
        """The keeper's proposal to the controller (1001): the new set epoch, None: refused."""
        if not await self.client.alter_sync_state_set(set(members)):
            return None
        return self.client.replica.sync_state_set_epoch

    def _view(self) -> tuple[int, frozenset[int], int]:
        r = self.client.replica
        return r.master_epoch, r.sync_state_set, r.sync_state_set_epoch

    def record(self, kind: str, fields: dict) -> None:
        """An event of this master (``lease_lost``, ``sync_state_set_changed``): logged, and
        archived with the node's events (``epoch`` is the archive's own field: the controller's
        master epoch goes as ``masterEpoch``)."""
        log.warning("controller event %s: %s", kind, fields)
        doc = dict(fields)
        if "epoch" in doc:
            doc["masterEpoch"] = doc.pop("epoch")
        if self._archive is not None:
            self._archive(kind, doc)

    def handlers(self) -> dict:
        return {RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self._notified}

    def runtime_info(self) -> dict[str, object]:
        c = self.client
        members, set_epoch = c.replica.sync_state_set, c.replica.sync_state_set_epoch
        if self.keeper is not None and self.keeper.active:  # the master's own, fresher view
            members, set_epoch = self.keeper.state.members, self.keeper.set_epoch
        return {
            "controllerLeader": c.leader or "",
            "controllerBrokerId": -1 if c.broker_id is None else c.broker_id,
            "controllerMasterEpoch": c.replica.master_epoch,
            "controllerFenced": c.fenced,
            # SyncStateSet membership (clusterList): the set as this node last knew it
            "controllerSyncStateSet": ",".join(str(m) for m in sorted(members)),
            "controllerSyncStateSetEpoch": set_epoch,
            "inSyncStateSet": c.broker_id is not None and c.broker_id in members,
            "controllerSyncStateSetSize": len(members),
        }

    async def _notified(self, conn, req: RemotingCommand) -> RemotingCommand | None:
        """A hint only: ask the controller leader now (the next round pulls at once)."""
        self.client.pull_now()
        if req.is_oneway:
            return None
        return req.make_response(ResponseCode.SUCCESS)
