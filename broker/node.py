"""The broker node process (RocketMQ's BrokerController): ``BrokerNode.start`` builds its parts
once -- store, role owner, replication, processors and services, registration -- handing each
the ones it needs, then runs them until ``stop()``. ``haproof broker -c broker.conf`` runs one in
the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from broker import aio
from broker.acl.permission import AclChecker
from broker.config import BrokerConfig, BrokerRole
from broker.ha.epoch import EpochFile
from broker.ha.failover import FailoverService
from broker.ha.role import BrokerRoleState
from broker.ha.role_services import RoleServices
from broker.node_parts import (
    NodeService,
    PeerLinks,
    acl_checker,
    acl_signer,
    remoting_server,
    stable_node_name,
)
from broker.processors.admin import AdminProcessor, ConsumerManager
from broker.processors.guard import guarded
from broker.processors.names import topic_problem
from broker.processors.pull import LongPollWaiters, PullProcessor
from broker.processors.runtime import BrokerStats
from broker.processors.send import SendProcessor
from broker.processors.sendback import SendBackProcessor
from broker.registration import NamesrvRegistration
from broker.remoting.codes import RequestCode
from broker.remoting.server import RemotingServer, exposure_refusal, warn_if_exposed
from broker.store.config_store import topic_config
from broker.store.message_store import MessageStore
from contracts.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "TBW102"
PERM_INHERIT = 0x1  # RocketMQ PermName.PERM_INHERIT
PERM_RW_INHERIT = 0x7  # read | write | inherit: TBW102's permission
CLIENT_SCAN_INTERVAL_MS = 10_000


class BrokerNode:
    """Build with ``await BrokerNode.start(config)``; stop with ``await node.stop()``.

    ``config`` is what was configured (broker.conf, with runtime updates); what the node is now
    (role, broker id, epoch, the master it follows) is ``role``, the one owner every part reads.
    The parts are built here, once, and each gets the ones it needs."""

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
    ) -> None:
        self.config = config
        self.config_path = config_path  # the broker.conf it was read from (runtime updates)
        self.store = store
        self.role = role
        self.host = host
        self.node_name = node_name
        self.acl = acl  # None unless aclEnable
        self.links = links or PeerLinks()  # TLS and ACL signing of this node's own connections
        self.running = False
        self.stats = BrokerStats()
        self.consumers = ConsumerManager()
        self.long_poll: LongPollWaiters
        self.server: RemotingServer
        self.ns_client = self.links.client()
        self.failover = FailoverService(self, self.links)
        # what runs only in the current role (HAService / HAClient + SlaveSynchronize)
        self.replication = RoleServices(role, self._build_role_services)
        self.registration = NamesrvRegistration(
            config, store, role, self.replication, self.ns_client
        )
        # on_truncated(from_offset, to_offset): a rejoining node cut its log back
        self.truncate_listeners: list = []
        self.services: list[NodeService] = []  # see _build_services
        self.offset_log = None  # offsetCommitThroughLog's OffsetLogService (_build_services)
        self._tasks: list[asyncio.Task] = []

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
    ) -> BrokerNode:
        """``host`` overrides the config's listenHost; ``config_path`` is the broker.conf
        runtime config updates are written to (None: they are refused)."""
        host = config.listen_host if host is None else host
        exposed = exposure_refusal(
            f"broker {config.node_name}", host, config.acl_enable, config.insecure
        )
        if exposed is not None:  # --host beyond loopback (listenHost is checked with the file)
            raise ConfigError(exposed)
        acl = acl_checker(config)  # a bad plain_acl.yml stops the start before the store opens
        signer = acl_signer(config)  # signs what this broker sends (None: no keys)
        if acl is not None and signer is None:
            log.warning("aclEnable=true without accessKey/secretKey: this broker's own requests "
                        "(registration, slave sync, HA) go unsigned and an ACL peer refuses them")  # fmt: skip
        links = PeerLinks.from_config(config, signer)
        role = BrokerRoleState.configured(config, EpochFile.load(config.store_path_root_dir))
        store = MessageStore.open(config, accept_offset_loss=accept_offset_loss, role_state=role)
        try:
            node = cls(
                config, store, role, node_name=stable_node_name(config), host=host, acl=acl,
                links=links, config_path=config_path,
            )  # fmt: skip
            await node._start()
        except BaseException:
            store.shutdown()
            raise
        return node

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self.long_poll = LongPollWaiters(loop)
        self.store.add_dispatch_listener(self.long_poll.on_dispatch)
        if (
            self.config.auto_create_topic_enable
            and DEFAULT_TOPIC not in self.store.topic_config.table
        ):
            tc = topic_config(DEFAULT_TOPIC, self.config.default_topic_queue_nums, PERM_RW_INHERIT)
            self.store.topic_config.put(DEFAULT_TOPIC, tc)
            self.store.topic_config.persist()
        self.store.start()
        send = SendProcessor(self, self.stats, self.replication)
        pull, admin = PullProcessor(self), AdminProcessor(self)
        processors = {
            **send.handlers(),
            **SendBackProcessor(self, send).handlers(),
            RequestCode.PULL_MESSAGE: pull.pull,
            **admin.handlers(),
        }
        self.services = self._build_services()
        for service in self.services:
            processors.update(getattr(service, "handlers", dict)())
        # every request passes the ACL and name checks first (broker/processors/guard.py)
        self.server = remoting_server(self.config, guarded(processors, self.acl))
        warn_if_exposed(f"broker {self.node_name}", self.host, self.acl is not None)
        self.running = True
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
        self._tasks = [
            loop.create_task(self.registration.loop()),
            loop.create_task(self._persist_offsets_loop()),
            loop.create_task(self._scan_clients_loop()),
        ]
        log.info(
            "broker %s (id %d, %s) serving on %s",
            self.config.broker_name,
            self.role.broker_id,
            self.role.role.value,
            self.config.broker_addr,
        )

    def _build_services(self) -> list[NodeService]:
        """The node's subsystems, started in this order after the remoting server and stopped in
        reverse. Each has ``async start()``, ``async stop()`` and optionally
        ``handlers() -> {request code: handler}`` and ``runtime_info() -> {key: value}``."""
        from broker.ha.offset_sync import OffsetPreOnline
        from broker.processors.broker_config import BrokerConfigService
        from broker.processors.ha_admin import OffsetAdminService
        from broker.processors.runtime import RuntimeInfoService
        from broker.schedule import ScheduleMessageService

        services: list[NodeService] = [
            RuntimeInfoService(self, self.stats),
            self.failover,
            OffsetPreOnline(self.store, self.config, self.role, self.links),
            OffsetAdminService(self),
            BrokerConfigService(self),
            self.replication,
            ScheduleMessageService(self.store),  # delivers only while the store is a master
        ]
        if self.config.offset_commit_through_log:  # commits as records (broker/offset_log)
            from broker.offset_log.service import OffsetLogService

            self.offset_log = OffsetLogService(self.store, self.role, self.replication, self.config)
            services.append(self.offset_log)
        if self.config.archive_enable:
            from broker.archive.node_archiver import NodeArchiver

            archiver = NodeArchiver(
                self.store, self.config, self.node_name, role=self.role,
                replication=self.replication, truncate_listeners=self.truncate_listeners,
            )  # fmt: skip
            services.append(archiver)
        return services

    def _build_role_services(self, role: BrokerRole) -> list[NodeService]:
        """What runs only in ``role``; rebuilt at every role change."""
        if role.is_master:
            from broker.ha.service import HAService

            return [HAService(self.store, self.config, self.role, self.host, self.acl)]
        from broker.ha.client import HAClient
        from broker.ha.slave_sync import SlaveSynchronize

        client = HAClient(
            self.store, self.config, self.role, node_name=self.node_name,
            namesrv_addrs=self.namesrv_addrs, failover=self.failover, signer=self.links.signer,
        )  # fmt: skip
        return [client, SlaveSynchronize(self.store, self.config, self.links, client.known_master)]

    # -- hooks for subsystems -------------------------------------------------------------------

    def request_register(self) -> None:
        """Register with the name servers now (after a role or topic change)."""
        self.registration.request()

    async def register_all(self) -> int:
        """Register with every name server now; returns how many accepted."""
        return await self.registration.register_all()

    async def await_replication(self, result):
        """After a local put: on a SYNC_MASTER, wait for the slaves (broker/ha) and return the
        final PutMessageStatus; otherwise the put's own status."""
        return await self.replication.await_replication(result, self.config.sync_flush_timeout_ms)

    def notify_truncated(self, from_offset: int, to_offset: int) -> None:
        for listener in list(self.truncate_listeners):
            try:
                listener(from_offset, to_offset)
            except Exception:
                log.exception("truncation listener %r failed", listener)

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table: every service adds its own keys."""
        # which asyncio loop serves (eventLoop): uvloop or asyncio
        info: dict[str, str] = {
            "eventLoop": type(asyncio.get_running_loop()).__module__.partition(".")[0]
        }
        for service in self.services:
            extra = getattr(service, "runtime_info", None)
            if extra is not None:
                info.update({k: str(v) for k, v in extra().items()})
        return info

    # -- topics ---------------------------------------------------------------------------------

    def ensure_topic(self, topic: str, default_topic: str | None, queue_nums: int) -> dict | None:
        """The topic's config; created from the default topic (auto-create) when allowed."""
        table = self.store.topic_config.table
        tc = table.get(topic)
        if tc is not None:
            return tc
        if topic_problem(topic) is not None:
            return None  # the dispatch guard refuses such names first; never a table key
        template = table.get(default_topic or DEFAULT_TOPIC)
        if not self.config.auto_create_topic_enable or template is None:
            return None
        if not int(template.get("perm", 0)) & PERM_INHERIT:
            return None
        nums = max(1, min(queue_nums, int(template.get("writeQueueNums", queue_nums))))
        tc = topic_config(topic, nums, int(template["perm"]) & ~PERM_INHERIT)
        self.store.topic_config.put(topic, tc)
        self.store.topic_config.persist()
        log.info("auto-created topic %s with %d queues", topic, nums)
        self.request_register()
        return tc

    # -- periodic work --------------------------------------------------------------------------

    async def _persist_offsets_loop(self) -> None:
        interval_ms = self.config.flush_consumer_offset_interval_ms
        await self.store.consumer_offsets.persist_periodically(interval_ms)

    async def _scan_clients_loop(self) -> None:
        while True:
            await asyncio.sleep(CLIENT_SCAN_INTERVAL_MS / 1000)
            self.consumers.scan_idle()

    # -- shutdown -------------------------------------------------------------------------------

    async def stop(self) -> None:
        self.running = False
        self.long_poll.wake_all()
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:
                log.exception("stopping %r failed", service)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
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


if __name__ == "__main__":
    import sys

    from broker.cli import main

    sys.exit(main(["broker", *sys.argv[1:]]))
