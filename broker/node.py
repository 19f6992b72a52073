"""The broker node process: store + remoting server + name server registration.
``haproof broker -c broker.conf`` runs one in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal

from broker import aio
from broker.acl.permission import AclChecker
from broker.acl.signing import AclSigner
from broker.config import BrokerConfig
from broker.processors.admin import AdminProcessor, ConsumerManager
from broker.processors.guard import guarded
from broker.processors.names import topic_problem
from broker.processors.pull import LongPollWaiters, PullProcessor
from broker.processors.send import SendProcessor
from broker.processors.sendback import SendBackProcessor
from broker.remoting import tls
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.limits import ServerLimits
from broker.remoting.server import RemotingServer, warn_if_exposed
from broker.remoting.tls import TlsMode
from broker.store.checkpoint import atomic_write
from broker.store.config_store import topic_config
from broker.store.message_store import MessageStore
from broker.store.results import PutMessageStatus
from contracts.errors import RemotingError

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "TBW102"
PERM_INHERIT = 0x1  # RocketMQ PermName.PERM_INHERIT
PERM_RW_INHERIT = 0x7  # read | write | inherit: TBW102's permission
REGISTER_INTERVAL_MS = 30_000
REGISTER_TIMEOUT_MS = 3000
CLIENT_SCAN_INTERVAL_MS = 10_000


class BrokerNode:
    """Build with ``await BrokerNode.start(config)``; stop with ``await node.stop()``."""

    def __init__(self, config: BrokerConfig, store: MessageStore) -> None:
        self.config = config
        self.config_path: str | None = None  # the broker.conf it was read from (runtime updates)
        self.store = store
        self.running = False
        self.host = "0.0.0.0"
        self.node_name = stable_node_name(config)
        self.failover = None  # broker/ha/failover.FailoverService once started
        self.stats = None  # broker/processors/runtime.BrokerStats once its service exists
        self.role_services: list = []  # HAService on a master, HAClient on a slave
        self.consumers = ConsumerManager()
        self.long_poll: LongPollWaiters
        self.server: RemotingServer
        self.acl = acl_checker(config)  # None unless aclEnable
        self.rpc_hook = acl_signer(config)  # signs what this broker sends (None: no keys)
        if self.acl is not None and self.rpc_hook is None:
            log.warning("aclEnable=true without accessKey/secretKey: this broker's own requests "
                        "(registration, slave sync, HA) go unsigned and an ACL peer refuses them")  # fmt: skip
        self.ns_client = RemotingClient(rpc_hook=self.rpc_hook)
        self.client_ssl = None  # tlsEnable: the SSL context of this node's own connections
        self._tasks: list[asyncio.Task] = []
        self._register_now = asyncio.Event()
        # Optional subsystems (replication, delayed messages, archiving...): see _build_services.
        self.services: list = []
        # Replication hooks, set by broker/ha when it runs on this node.
        self.ha = (
            None  # master side: async wait_replicated(put_result, timeout_ms) -> PutMessageStatus
        )
        self.ha_client = None  # slave side
        self.epochs = None  # epoch file: .current_epoch
        # Listeners: on_role_changed(old_role, new_role, epoch); on_truncated(from_offset, to_offset)
        self.role_listeners: list = []
        self.truncate_listeners: list = []

    @property
    def namesrv_addrs(self) -> list[str]:
        raw = self.config.namesrv_addr or ""
        return [a.strip() for a in raw.split(";") if a.strip()]

    @classmethod
    async def start(
        cls, config: BrokerConfig, host: str | None = None, *, accept_offset_loss: bool = False
    ) -> BrokerNode:
        """``host`` overrides the config's listenHost."""
        host = config.listen_host if host is None else host
        acl_checker(config)  # a bad plain_acl.yml stops the start before the store is opened
        store = MessageStore.open(config, accept_offset_loss=accept_offset_loss)
        node = cls(config, store)
        try:
            node = cls(config, store)
            await node._start(host)
        except BaseException:
            store.shutdown()
            raise
        return node

    async def _start(self, host: str) -> None:
        self.host = host
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
        send, pull, admin = SendProcessor(self), PullProcessor(self), AdminProcessor(self)
        processors = {
            **send.handlers(),
            **SendBackProcessor(self, send).handlers(),
            RequestCode.PULL_MESSAGE: pull.pull,
            **admin.handlers(),
        }
        if self.config.tls_enable:
            self.client_ssl = tls.client_context(self.config.tls_client_trust_cert_path)
            self.ns_client.ssl = self.client_ssl
        self.services = self._build_services()
        for service in self.services:
            processors.update(getattr(service, "handlers", dict)())
        # every request passes the ACL and name checks first (broker/processors/guard.py)
        self.server = _remoting_server(self.config, guarded(processors, self.acl))
        warn_if_exposed(f"broker {self.node_name}", host, self.acl is not None)
        self.running = True
        started = []
        try:
            for service in self.services:
                await service.start()
                started.append(service)
            # Register before the port opens: once a client can connect, routes lead here.
            await self.register_all()
            await self.server.start(host, self.config.listen_port)
        except BaseException:
            for service in reversed(started):
                await service.stop()
            await self.server.stop()
            raise
        self._tasks = [
            loop.create_task(self._register_loop()),
            loop.create_task(self._persist_offsets_loop()),
            loop.create_task(self._scan_clients_loop()),
        ]
        log.info(
            "broker %s (id %d, %s) serving on %s",
            self.config.broker_name,
            self.config.broker_id,
            self.store.role.value,
            self.config.broker_addr,
        )

    def _build_services(self) -> list:
        """The node's optional subsystems, started in this order after the remoting server and
        stopped in reverse. Each has ``async start()``, ``async stop()`` and optionally
        ``handlers() -> {request code: handler}`` and ``runtime_info() -> {key: value}``."""
        from broker.ha.failover import FailoverService
        from broker.ha.offset_sync import OffsetPreOnline
        from broker.processors.broker_config import BrokerConfigService
        from broker.processors.ha_admin import OffsetAdminService
        from broker.processors.runtime import RuntimeInfoService
        from broker.schedule import ScheduleMessageService

        services: list = [
            RuntimeInfoService(self),
            FailoverService(self),
            OffsetPreOnline(self),
            OffsetAdminService(self),
            BrokerConfigService(self),
            _RoleServices(self),
            ScheduleMessageService(self.store),  # delivers only while the store is a master
        ]
        if self.config.archive_enable:
            from broker.archive.node_archiver import NodeArchiver

            services.append(NodeArchiver(self))
        return services

    def _build_role_services(self) -> list:
        """What runs only in the current role; rebuilt at every role change."""
        if self.store.role.is_master:
            from broker.ha.service import HAService

            return [HAService(self)]
        from broker.ha.client import HAClient
        from broker.ha.slave_sync import SlaveSynchronize

        return [HAClient(self), SlaveSynchronize(self)]

    async def start_role_services(self) -> None:
        self.role_services = self._build_role_services()
        for service in self.role_services:
            await service.start()

    async def stop_role_services(self) -> None:
        for service in reversed(self.role_services):
            try:
                await service.stop()
            except Exception:
                log.exception("stopping %r failed", service)
        self.role_services = []

    def request_register(self) -> None:
        """Register with the name servers now (after a role or topic change)."""
        self._register_now.set()

    # -- hooks for subsystems -------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.epochs.current_epoch if self.epochs is not None else 0

    async def await_replication(self, result):
        """After a local put: on a SYNC_MASTER, wait for the slaves (broker/ha) and return the
        final PutMessageStatus; otherwise the put's own status."""
        if self.ha is None or result.status is not PutMessageStatus.PUT_OK:
            return result.status
        return await self.ha.wait_replicated(result, self.config.sync_flush_timeout_ms)

    def notify_role_changed(self, old_role, new_role, epoch: int) -> None:
        for listener in list(self.role_listeners):
            try:
                listener(old_role, new_role, epoch)
            except Exception:
                log.exception("role-change listener %r failed", listener)

    def notify_truncated(self, from_offset: int, to_offset: int) -> None:
        for listener in list(self.truncate_listeners):
            try:
                listener(from_offset, to_offset)
            except Exception:
                log.exception("truncation listener %r failed", listener)

    @property
    def offset_reset_listeners(self) -> list:
        """on_offset_reset(group, topic, queue_id, from_offset, to_offset): an explicit rewind;
        owned by the store's ConsumerOffsetManager."""
        return self.store.consumer_offsets.reset_listeners

    def notify_offset_reset(
        self, group: str, topic: str, queue_id: int, from_offset: int, to_offset: int
    ) -> None:
        self.store.consumer_offsets.notify_reset(group, topic, queue_id, from_offset, to_offset)

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table: every service adds its own keys."""
        # which asyncio loop serves (eventLoop): uvloop or asyncio
        info: dict[str, str] = {
            "eventLoop": type(asyncio.get_running_loop()).__module__.partition(".")[0]
        }
        for service in [*self.services, *self.role_services]:
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
        self._register_now.set()
        return tc

    # -- name server registration ---------------------------------------------------------------

    def _register_request(self) -> RemotingCommand:
        body = {
            "topicConfigSerializeWrapper": {
                "topicConfigTable": self.store.topic_config.table,
                "dataVersion": self.store.topic_config.data_version,
            },
            "filterServerList": [],
        }
        return RemotingCommand.request(
            RequestCode.REGISTER_BROKER,
            {
                "brokerName": self.config.broker_name,
                "brokerAddr": self.config.broker_addr,
                "clusterName": self.config.broker_cluster_name,
                "haServerAddr": self.config.ha_server_addr,
                "brokerId": self.config.broker_id,
                "compressed": False,
            },
            json.dumps(body).encode(),
        )

    async def register_all(self) -> int:
        """Register with every name server; returns how many accepted."""
        ok = 0
        for addr in self.namesrv_addrs:
            try:
                resp = await self.ns_client.invoke(
                    addr, self._register_request(), REGISTER_TIMEOUT_MS
                )
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
        a configured haMasterAddress wins, as RocketMQ's updateMasterHAServerAddrPeriodically
        is off by default."""
        client = self.ha_client
        if client is None:
            return
        ha_addr = None if self.config.ha_master_address else fields.get("haServerAddr") or None
        client.set_master(ha_addr, fields.get("masterAddr") or None)

    async def _register_loop(self) -> None:
        while True:
            self._register_now.clear()
            await self.register_all()
            try:
                async with asyncio.timeout(REGISTER_INTERVAL_MS / 1000):
                    await self._register_now.wait()
            except TimeoutError:
                pass

    async def _unregister_all(self) -> None:
        for addr in self.namesrv_addrs:
            req = RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER,
                {
                    "brokerName": self.config.broker_name,
                    "brokerAddr": self.config.broker_addr,
                    "clusterName": self.config.broker_cluster_name,
                    "brokerId": self.config.broker_id,
                },
            )
            try:
                await self.ns_client.invoke(addr, req, REGISTER_TIMEOUT_MS)
            except RemotingError as exc:
                log.info("unregister from name server %s failed: %s", addr, exc)

    # -- periodic persistence -------------------------------------------------------------------

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
        await self._unregister_all()
        await self.ns_client.close()
        await self.server.stop()
        self.store.shutdown()
        log.info("broker %s stopped", self.config.broker_name)


class _RoleServices:
    """Starts and stops the role-specific services as one service of the node."""

    def __init__(self, node: BrokerNode) -> None:
        self.node = node

    async def start(self) -> None:
        await self.node.start_role_services()

    async def stop(self) -> None:
        await self.node.stop_role_services()


def acl_checker(config) -> AclChecker | None:
    """The request checker when ``aclEnable`` (plain_acl.yml read now: a bad file stops the start
    with a ConfigError naming it)."""
    if not getattr(config, "acl_enable", False):
        return None
    return AclChecker.from_file(config.acl_file)


def acl_signer(config, environ=os.environ) -> AclSigner | None:
    """This node's own ACL signer, or None: ``accessKey`` / ``secretKey`` from broker.conf, else
    from the environment (``HAPROOF_ACCESS_KEY`` / ``HAPROOF_SECRET_KEY``: a deployment keeps
    the secret out of the config file, e.g. docker-compose.yml)."""
    ak = getattr(config, "access_key", None) or environ.get("HAPROOF_ACCESS_KEY")
    sk = getattr(config, "secret_key", None) or environ.get("HAPROOF_SECRET_KEY")
    if ak and sk:
        return AclSigner(ak, sk)
    return None


def stable_node_name(config: BrokerConfig) -> str:
    """DESIGN.md: ``nodeName`` from the config, else ``{brokerName}-{brokerId}`` at the first
    start, kept in ``{storePathRootDir}/nodeName`` because brokerId changes at failover."""
    path = os.path.join(config.store_path_root_dir, "nodeName")
    default = f"{config.broker_name}-{config.broker_id}"
    explicit = config.node_name if config.node_name != default else None
    try:
        with open(path, encoding="utf-8") as fh:
            kept = fh.read().strip()
    except FileNotFoundError:
        kept = None
    name = explicit or kept or default
    if name != kept:
        atomic_write(path, name.encode())
    return name


def _remoting_server(config: BrokerConfig, processors: dict) -> RemotingServer:
    ctx = None
    if config.tls_mode is not TlsMode.DISABLED:
        ctx = tls.server_context(
            config.tls_server_cert_path, config.tls_server_key_path, config.tls_server_key_password
        )
    return RemotingServer(
        processors, ServerLimits.from_config(config), tls_mode=config.tls_mode, ssl_context=ctx
    )


async def serve(
    config: BrokerConfig,
    host: str | None,
    config_path: str | None = None,
    accept_offset_loss: bool = False,
) -> None:
    node = await BrokerNode.start(config, host, accept_offset_loss=accept_offset_loss)
    node.config_path = config_path
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
        help="address to listen on (default: listenHost in broker.conf, itself 0.0.0.0 -- all "
        "interfaces, with a loud warning while ACL is off)",
    )
    p.add_argument(
        "--check-config",
        action="store_true",
        help="validate broker.conf (keys, values, addresses) and exit: 0 valid, 2 not",
    )
    p.add_argument(
        "--accept-offset-loss",
        action="store_true",
        help="start even when consumerOffset.json and its backup are unreadable, serving what is "
        "left (recorded as an offset_reset event); restore the file instead when you can",
    )
    p.set_defaults(func=run)


if __name__ == "__main__":
    import sys

    from broker.cli import main

    sys.exit(main(["broker", *sys.argv[1:]]))
