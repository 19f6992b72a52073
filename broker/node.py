"""The broker node process (RocketMQ's BrokerController): ``BrokerNode.start`` builds its parts
once, handing each the typed collaborators it uses (never the node), and runs them until
``stop()``; every part reads time from the one ``Clock`` it is given. ``haproof broker -c
broker.conf`` runs one in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from broker import aio, planted_bugs
from broker.acl.permission import AclChecker
from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import BrokerConfig
from broker.ha.controller_role import controller_mode, initial_role, write_gate
from broker.ha.failover import FailoverService
from broker.ha.offset_sync import OffsetPreOnline
from broker.ha.reconcile import EpochReconciler
from broker.ha.role_services import RoleServices
from broker.live_config import LiveConfig
from broker.loop_service import Periodic
from broker.metrics.broker_metrics import broker_metrics_service
from broker.metrics.refusals import Refusals
from broker.node_parts import (
    NodeService,
    PeerLinks,
    TopicAutoCreate,
    TruncationListeners,
    acl_checker,
    acl_signer,
    remoting_server,
    stable_node_name,
)
from broker.node_roles import RoleServiceFactory
from broker.node_service import RuntimeInfoTable
from broker.offset_log.service import OffsetLogService
from broker.processors.admin import AdminProcessor, ConsumerManager
from broker.processors.broker_config import BrokerConfigService
from broker.processors.guard import guarded
from broker.processors.ha_admin import OffsetAdminService
from broker.processors.mqadmin import mqadmin_handlers
from broker.processors.pull import LongPollWaiters, PullProcessor
from broker.processors.runtime import BrokerStats, RuntimeInfoService
from broker.processors.send import SendProcessor
from broker.processors.sendback import SendBackProcessor
from broker.registration import NamesrvRegistration
from broker.remoting.codes import RequestCode
from broker.remoting.server import RemotingServer, exposure_refusal, warn_if_exposed
from broker.schedule import ScheduleMessageService
from broker.store.epoch import EpochFile
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts.errors import ConfigError

log = logging.getLogger(__name__)

CLIENT_SCAN_INTERVAL_MS = 10_000


class BrokerNode:
    """Build with ``await BrokerNode.start(config)``; stop with ``await node.stop()``.

    ``config`` is the one holder of what is configured now (broker.conf, with runtime updates:
    ``broker/live_config.py``); what the node is now (role, broker id, epoch, the master it
    follows) is ``role``, the one owner every part reads. The parts are built here, once, and
    each gets the typed collaborators it uses; none gets the node."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        role: BrokerRoleState,
        *,
        node_name: str,
        host: str = "0.0.0.0",
        acl: AclChecker | None = None,
        links: PeerLinks | None = None,
        config_path: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        live: LiveConfig | None = None,
    ) -> None:
        self.config = live or LiveConfig(config)
        self.config_path = config_path  # the broker.conf it was read from (runtime updates)
        self.store = store
        self.role = role
        self.host = host
        self.node_name = node_name
        self.clock = clock
        self.acl = acl  # None unless aclEnable
        self.links = links or PeerLinks()  # TLS and ACL signing of this node's own connections
        self.stats = BrokerStats(clock.wall_ms)
        self.consumers = ConsumerManager(clock.wall_ms)
        self.long_poll: LongPollWaiters
        self.server: RemotingServer
        self.ns_client = self.links.client()
        self.truncations = TruncationListeners()
        self.info = RuntimeInfoTable()
        self.reconciler = EpochReconciler(store, role, self.links, node_name, self.truncations)
        # what runs only in the current role (HAService / HAClient + SlaveSynchronize)
        roles = RoleServiceFactory(
            store,
            self.config,
            role,
            self.reconciler,
            self.links,
            host=host,
            acl=acl,
            node_name=node_name,
            clock=clock,
        )
        self.replication = RoleServices(role, roles.build, roles.sync_state)
        self.registration = NamesrvRegistration(
            self.config, store, role, self.replication, self.ns_client, clock=clock
        )
        self.topics = TopicAutoCreate(store, self.config, self.registration.topics_changed)
        self.failover = FailoverService(
            store,
            self.config,
            role,
            self.replication,
            self.reconciler,
            self.registration,
            self.info,
            node_name=node_name,
        )
        self.gate = write_gate(self.config)  # closed: sends refused (controller mode: no role)
        self.services: list[NodeService] = []  # see _build_services
        # offsetCommitThroughLog: commits and resets as records of the log (broker/offset_log)
        copy = planted_bugs.active("offset-copy")  # the simulation's planted bug: no log
        through_log = self.config.offset_commit_through_log and not copy
        parts = (store, role, self.replication, self.config, roles.confirm_watch)
        self.offset_log = OffsetLogService(*parts, clock=clock) if through_log else None
        self._loops = [
            Periodic(
                "persist-consumer-offsets",
                period_ms=self.config.flush_consumer_offset_interval_ms,
                round_=store.consumer_offsets.persist_round,
                clock=clock,
            ),
            Periodic(
                "scan-idle-clients",
                period_ms=CLIENT_SCAN_INTERVAL_MS,
                round_=self.consumers.scan_idle_round,
                clock=clock,
            ),
        ]

    @property
    def namesrv_addrs(self) -> list[str]:
        return self.config.namesrv_addrs

    @classmethod
    async def start(
        cls,
        config: BrokerConfig,
        host: str | None = None,
        *,
        accept_offset_loss: bool = False,
        config_path: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> BrokerNode:
        """``host`` overrides the config's listenHost; ``config_path`` is the broker.conf
        runtime config updates are written to (None: they are refused); ``clock`` is what every
        part of the node reads time from and sleeps on (a test's ``DrivenClock``)."""
        host = config.listen_host if host is None else host
        exposed = exposure_refusal(
            f"broker {config.node_name}", host, config.acl_enable, config.insecure
        )
        if exposed is not None:  # --host beyond loopback (listenHost is checked with the file)
            raise ConfigError(exposed)
        acl = acl_checker(config)  # a bad plain_acl.yml stops the start before the store opens
        signer = acl_signer(config)  # signs what this broker sends (None: no keys)
        if acl is not None and signer is None:
            log.warning(
                "aclEnable=true without accessKey/secretKey: this broker's own requests "
                "(registration, slave sync, HA) go unsigned and an ACL peer refuses them"
            )
        links = PeerLinks.from_config(config, signer)
        live = LiveConfig(config)
        role = initial_role(config, EpochFile.load(config.store_path_root_dir))
        store = MessageStore.open(
            live,
            accept_offset_loss=accept_offset_loss,
            role_state=role,
            clock_ms=clock.wall_ms,
            clock=clock,
        )
        try:
            node = cls(
                config,
                store,
                role,
                node_name=stable_node_name(config),
                host=host,
                acl=acl,
                links=links,
                config_path=config_path,
                clock=clock,
                live=live,
            )
            await node._start()
        except BaseException:
            store.shutdown()
            raise
        return node

    async def _start(self) -> None:
        self.long_poll = LongPollWaiters(asyncio.get_running_loop(), self.clock)
        self.store.add_dispatch_listener(self.long_poll.on_dispatch)
        self.store.queries.on_read_end_advanced = self.long_poll.on_read_end_advanced
        self.topics.ensure_default_topic()
        self.store.start()
        self.refusals = Refusals()  # refused requests by reason (metrics)
        self.services = self._build_services()
        self.info.services = self.services
        processors = self.refusals.counted(guarded(self._processors(), self.acl))
        self.server = remoting_server(self.config, processors, clock=self.clock)
        warn_if_exposed(f"broker {self.node_name}", self.host, self.acl is not None)
        started = []
        try:
            for service in self.services:
                await service.start()
                started.append(service)
            # Register before the port opens: once a client can connect, routes lead here.
            await self.register_all()
            await self.server.start(self.host, self.config.listen_port)
        except BaseException:
            for service in reversed(started):
                await service.stop()
            await self.server.stop()
            raise
        self.registration.start()
        for loop in self._loops:
            loop.start()
        log.info(
            "broker %s (id %d, %s) serving on %s",
            self.config.broker_name,
            self.role.broker_id,
            self.role.role.value,
            self.config.broker_addr,
        )

    def _processors(self) -> dict:
        """Every request code this node answers: the request processors' and the services'."""
        store, config = self.store, self.config
        send = SendProcessor(store, config, self.topics, self.stats, self.replication, self.gate)
        hooks = {"offset_log": self.offset_log, "gate": self.gate}  # offset commits, fencing
        pull = PullProcessor(store, config, self.consumers, self.long_poll, self.stats, **hooks)
        admin = AdminProcessor(store, config, self.role, self.consumers, self.registration, **hooks)
        sendback = SendBackProcessor(store, config, send, self.registration)
        processors = {
            **send.handlers(),
            **sendback.handlers(),
            RequestCode.PULL_MESSAGE: pull.pull,
            **admin.handlers(),
            **mqadmin_handlers(store, self.role, self.registration, self.consumers, self.stats),
        }
        for service in self.services:
            processors.update(service.handlers())
        return processors

    def _build_services(self) -> list[NodeService]:
        """The node's subsystems, started in this order before the remoting server opens and
        stopped in reverse."""
        store, config, role, clock = self.store, self.config, self.role, self.clock
        services: list[NodeService] = [
            RuntimeInfoService(store, config, role, self.stats, self.info, clock=clock),
            self.failover,
            OffsetPreOnline(store, config, role, self.links),
            OffsetAdminService(store, config, role),
            BrokerConfigService(store, config, self.config_path, clock=clock),
            self.replication,
            # delivers only while the store is a master
            ScheduleMessageService(store, clock_ms=clock.wall_ms, clock=clock),
        ]
        if self.offset_log is not None:
            services.append(self.offset_log)
        archiver = None  # archiveEnable: the node's events and log go to the archive
        if config.archive_enable:
            from broker.archive.node_archiver import NodeArchiver

            archiver = NodeArchiver(
                store,
                config,
                self.node_name,
                role=role,
                replication=self.replication,
                truncations=self.truncations,
                clock_ms=clock.wall_ms,
                clock=clock,
            )
            services.append(archiver)
        if config.enable_controller_mode:  # last: after the failover finished any rejoin cut
            owner = (self.failover, role, self.reconciler, self.gate, self.replication)
            sink = None if archiver is None else archiver.record_event  # lease, SyncStateSet
            services.append(controller_mode(config, owner, store, self.links.client(), clock, sink))
        if config.metrics.enabled:  # metricsExporterType=PROM: last, so stopped first
            parts = (store, config, role, self.stats, self.info, self.replication, self.refusals)
            services.append(broker_metrics_service(*parts, node_name=self.node_name))
        return services

    # -- what the entry point and the tests drive ----------------------------------------------

    def request_register(self) -> None:  # with the name servers, now (role or topic change)
        self.registration.request()

    async def register_all(self) -> int:
        """Register with every name server now; returns how many accepted."""
        return await self.registration.register_all()

    async def await_replication(self, result):
        """After a local put: on a SYNC_MASTER, wait for the slaves (broker/ha) and return the
        final PutMessageStatus; otherwise the put's own status."""
        return await self.replication.await_replication(result, self.config.sync_flush_timeout_ms)

    # -- shutdown -------------------------------------------------------------------------------

    async def stop(self) -> None:
        self.long_poll.close()
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:
                log.exception("stopping %r failed", service)
        await self.registration.stop()
        for loop in self._loops:
            await loop.stop()
        self.consumers.cancel()
        await self.registration.unregister_all()
        await self.ns_client.close()
        await self.server.stop()
        self.store.shutdown()
        log.info("broker %s stopped", self.config.broker_name)


async def serve(
    config: BrokerConfig,
    host: str | None,
    config_path: str | None = None,
    accept_offset_loss: bool = False,
) -> None:
    node = await BrokerNode.start(
        config, host, accept_offset_loss=accept_offset_loss, config_path=config_path
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("broker shutting down")
    await node.stop()


def run(args: argparse.Namespace) -> int:
    config = BrokerConfig.from_file(args.config)
    if args.check_config:
        acl_checker(config)  # aclFile loads (exists, parses, no CHANGE-ME key)
        remoting_server(config, {})  # the TLS certificate and key load (nothing is bound)
        print(
            f"{args.config}: configuration OK: broker {config.broker_name} (id {config.broker_id}, "
            f"{config.broker_role.value}, {config.flush_disk_type.value}), store "
            f"{config.store_path_root_dir}"
        )
        return 0
    aio.run(serve(config, args.host, args.config, args.accept_offset_loss), config.event_loop)
    return 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("broker", help="run a broker node (foreground)")
    p.add_argument("-c", "--config", required=True, help="broker.conf (RocketMQ property names)")
    p.add_argument(
        "--host",
        default=None,
        help="address to listen on (default: listenHost in broker.conf, itself 127.0.0.1; an "
        "address beyond loopback needs aclEnable=true or insecure=true)",
    )
    p.add_argument(
        "--check-config",
        action="store_true",
        help="validate broker.conf (keys, values, addresses) and exit: 0 valid, 2 not",
    )
    p.add_argument(
        "--accept-offset-loss",
        "--accept-lost-offsets",
        action="store_true",
        help="start even when consumerOffset.json and its backup are unreadable (or both missing "
        "from a store holding messages), serving what is left (recorded as an offset_reset "
        "event); restore the file instead when you can",
    )
    p.set_defaults(func=run)
