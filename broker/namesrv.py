"""The name server: brokers register routes, clients look them up. ``haproof namesrv``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal

from broker import aio
from broker.acl.permission import AclChecker
from broker.clock import SYSTEM_CLOCK, Clock
from broker.loop_service import Periodic
from broker.metrics.exporter import MetricsService, MetricsSettings, settings_from_file
from broker.metrics.namesrv_metrics import NamesrvMetrics
from broker.metrics.refusals import Refusals
from broker.namesrv_config import NamesrvConfigService, namesrv_conf_values, scan_interval_of
from broker.namesrv_register import decode_register_body, registration_problem
from broker.namesrv_routes import RouteInfoManager
from broker.processors.guard import guarded
from broker.remoting import tls
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.limits import (
    DEFAULT_FRAME_READ_TIMEOUT_MS,
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_HOST,
    DEFAULT_MAX_PENDING_BYTES,
    ServerLimits,
)
from broker.remoting.server import RemotingServer, exposure_refusal, warn_if_exposed
from broker.remoting.tls import TlsMode
from contracts.errors import ConfigError

log = logging.getLogger(__name__)

SCAN_INTERVAL_MS = 10_000


class NameServer:
    """``acl``: with a checker (``--acl-file``), every request must be signed by an account of
    plain_acl.yml (registration and KV writes by an admin one), else NO_PERMISSION.
    ``server_options`` go to RemotingServer: limits, tls_mode, ssl_context."""

    def __init__(
        self,
        routes: RouteInfoManager | None = None,
        acl: AclChecker | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        scan_interval_ms: int = SCAN_INTERVAL_MS,
        config_values: dict[str, str] | None = None,
        config_path: str | None = None,
        **server_options,
    ) -> None:
        self.routes = routes or RouteInfoManager(clock_ms=clock.wall_ms)
        # the scan of brokers whose registration expired (RocketMQ scanNotActiveBroker)
        self.scanner = Periodic(
            "namesrv-scan", period_ms=scan_interval_ms, round_=self._scan, clock=clock
        )
        # broker address -> the connection it last registered over (RocketMQ's
        # BrokerHousekeepingService: a broker whose channel closes leaves the routes at once,
        # so clients switch to its slave without waiting for the 120 s expiry)
        self._broker_conns: dict[str, object] = {}
        # GET/UPDATE_NAMESRV_CONFIG over the settings it runs with (broker/namesrv_config.py)
        values = {"scanNotActiveBrokerInterval": str(scan_interval_ms), **(config_values or {})}
        self.config = NamesrvConfigService(values, self.scanner, config_path)
        self._watchers: set[asyncio.Task] = set()
        self.refusals = Refusals()  # refused requests by reason (the metrics)
        self.server = RemotingServer(
            self.refusals.counted(guarded(self._processors(), acl)),  # ACL, names: guard.py
            clock=clock,
            **server_options,
        )

    def _processors(self) -> dict:
        return {
            RequestCode.REGISTER_BROKER: self._register,
            RequestCode.UNREGISTER_BROKER: self._unregister,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_KV_CONFIG: self._kv_config,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self._write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self._write_perm,
            **self.config.handlers(),
        }

    async def _register(self, conn, req: RemotingCommand) -> RemotingCommand:
        body = decode_register_body(req)
        incremental = req.opt_field("incremental", "false").lower() == "true"
        wrapper = body.get("topicConfigSerializeWrapper")
        if isinstance(wrapper, dict) and not incremental:
            version = wrapper.get("dataVersion")
            if self.routes.holds_table(req.field("brokerAddr"), req.int_field("brokerId"), version):
                body["topicConfigSerializeWrapper"] = {"dataVersion": version}  # nothing new
        problem = registration_problem(req, body)
        if problem is not None:
            log.warning("REGISTER_BROKER from %s refused: %s", conn.peer, problem)
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=problem)
        result = self.routes.register_broker(
            cluster=req.field("clusterName"),
            broker_addr=req.field("brokerAddr"),
            broker_name=req.field("brokerName"),
            broker_id=req.int_field("brokerId"),
            ha_server_addr=req.opt_field("haServerAddr", "") or "",
            topic_config_wrapper=body.get("topicConfigSerializeWrapper"),
            incremental=incremental,
        )
        self._watch(
            conn,
            req.field("clusterName"),
            req.field("brokerAddr"),
            req.field("brokerName"),
            req.int_field("brokerId"),
        )
        fields = {"masterAddr": result.master_addr, "haServerAddr": result.ha_server_addr}
        if result.full_needed:
            fields["registerFull"] = "true"
        return req.make_response(ResponseCode.SUCCESS, ext_fields=fields)

    def _watch(self, conn, cluster: str, addr: str, name: str, broker_id: int) -> None:
        if self._broker_conns.get(addr) is conn:
            return
        self._broker_conns[addr] = conn

        async def on_close() -> None:
            await conn.closed.wait()
            if self._broker_conns.get(addr) is conn:
                del self._broker_conns[addr]
                live = self.routes.live_table.get(addr)
                if live is not None:
                    log.info(
                        "broker %s (%s id %d) connection closed: removed",
                        addr,
                        name,
                        live.broker_id,
                    )
                    self.routes.unregister_broker(cluster, addr, name, live.broker_id)

        task = asyncio.get_running_loop().create_task(on_close())
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _unregister(self, conn, req: RemotingCommand) -> RemotingCommand:
        self.routes.unregister_broker(
            req.field("clusterName"),
            req.field("brokerAddr"),
            req.field("brokerName"),
            req.int_field("brokerId"),
        )
        return req.make_response(ResponseCode.SUCCESS)

    async def _route(self, conn, req: RemotingCommand) -> RemotingCommand:
        topic = req.field("topic")
        route = self.routes.topic_route(topic)
        if route is None:
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {topic}",
            )
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(route).encode())

    async def _delete_topic(self, conn, req: RemotingCommand) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV (216, DeleteTopicFromNamesrvRequestHeader: ``topic``,
        optional ``clusterName``): the topic's routes, of that cluster's groups when given."""
        topic = req.field("topic")
        if self.routes.delete_topic(topic, req.opt_field("clusterName") or None):
            log.info("topic %s deleted from the routes by %s", topic, conn.peer)
        return req.make_response(ResponseCode.SUCCESS)

    async def _write_perm(self, conn, req: RemotingCommand) -> RemotingCommand:
        """WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327), header
        ``brokerName``: PERM_WRITE off / on in the group's queues of every topic (kept off in
        its registrations until added back); ``wipeTopicCount`` / ``addTopicCount``."""
        name = req.field("brokerName")
        if req.code == RequestCode.WIPE_WRITE_PERM_OF_BROKER:
            count, key = self.routes.wipe_write_perm(name), "wipeTopicCount"
        else:
            count, key = self.routes.add_write_perm(name), "addTopicCount"
        log.warning("%s of broker %s by %s: %d topics", key, name, conn.peer, count)
        return req.make_response(ResponseCode.SUCCESS, ext_fields={key: count})

    async def _cluster_info(self, conn, req: RemotingCommand) -> RemotingCommand:
        body = json.dumps(self.routes.cluster_info()).encode()
        return req.make_response(ResponseCode.SUCCESS, body=body)

    async def _kv_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(
            ResponseCode.QUERY_NOT_FOUND,
            remark=f"No config item, Namespace: {req.opt_field('namespace')} "
            f"Key: {req.opt_field('key')}",
        )

    async def _query_data_version(self, conn, req: RemotingCommand) -> RemotingCommand:
        live = self.routes.live_table.get(req.field("brokerAddr"))
        return req.make_response(ResponseCode.SUCCESS, ext_fields={"changed": live is None})

    async def _scan(self) -> None:
        for addr in self.routes.scan_not_active():
            log.warning(
                "broker %s expired: no registration within %d ms", addr, self.routes.expire_ms
            )


async def serve(
    host: str,
    port: int,
    acl: AclChecker | None = None,
    controller=None,
    metrics: MetricsSettings | None = None,
    settings: tuple[dict[str, str], str | None, int] = ({}, None, SCAN_INTERVAL_MS),
    **server_options,
) -> None:
    """``settings``: what GET_NAMESRV_CONFIG shows, the namesrv.conf updates go to, and the
    scan's period."""
    values, path, scan_ms = settings
    ns = NameServer(
        acl=acl, config_values=values, config_path=path, scan_interval_ms=scan_ms, **server_options
    )
    exporter, embedded = None, []  # embedded: the embedded controller's families, once it runs
    if metrics is not None and metrics.enabled:  # metricsExporterType=PROM in namesrv.conf
        own = NamesrvMetrics(ns.routes, ns.refusals, f"{host}:{port}").snapshot

        async def snapshot() -> list:
            out = await own()
            for more in embedded:  # a family both export (refusals) is the name server's
                names = {m.name for m in out}
                out += [m for m in await more() if m.name not in names]
            return out

        exporter = MetricsService("the name server", metrics, snapshot)
        await exporter.start()  # before the port opens: serving means scrapable
    await ns.server.start(host, port)
    log.info("namesrv listening on %s:%d", host, ns.server.port)
    if controller is not None:  # enableControllerInNamesrv: broker/controller/ on this port
        from broker.controller.cli import embed_in_namesrv

        controller = await embed_in_namesrv(controller, ns.server)
        embedded.append(controller.metrics_snapshot(f"{host}:{port}"))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ns.scanner.start()
    await stop.wait()
    log.info("namesrv shutting down")
    await ns.scanner.stop()
    if exporter is not None:
        await exporter.stop()
    if controller is not None:
        await controller.stop()
    await ns.server.stop()


def _server_options(args: argparse.Namespace) -> dict:
    try:
        limits = ServerLimits(
            idle_timeout_ms=args.idle_timeout_seconds * 1000,
            frame_read_timeout_ms=args.frame_read_timeout_ms,
            max_connections=args.max_connections,
            max_connections_per_host=args.max_connections_per_host,
            max_pending_bytes=args.max_pending_bytes,
        )
    except ValueError as exc:
        raise ConfigError(f"namesrv: {exc}") from exc
    mode = TlsMode.parse(args.tls_mode)
    ctx = None
    if mode is not TlsMode.DISABLED:
        password = tls.key_password(None, args.tls_key_password_file)
        ctx = tls.server_context(args.tls_cert, args.tls_key, password)
    return {"limits": limits, "tls_mode": mode, "ssl_context": ctx}


def run(args: argparse.Namespace) -> int:
    options = _server_options(args)  # ConfigError: one line, exit 2 (cli.main)
    exposed = exposure_refusal("the name server", args.host, bool(args.acl_file), args.insecure)
    if exposed is not None:
        raise ConfigError(f"namesrv --host {args.host}: {exposed} (--acl-file or --insecure)")
    acl = AclChecker.from_file(args.acl_file) if args.acl_file else None
    warn_if_exposed("the name server", args.host, acl is not None)
    port, controller, metrics = args.listen_port, None, None
    idle_s = str(args.idle_timeout_seconds)
    values = {"listenHost": args.host, "serverChannelMaxIdleTimeSeconds": idle_s}
    scan_ms = SCAN_INTERVAL_MS
    if args.config:
        from broker.controller.cli import read_namesrv_conf

        conf_port, controller = read_namesrv_conf(args.config)
        port = conf_port if conf_port is not None and args.listen_port == 9876 else port
        metrics = settings_from_file(args.config)
        values.update(namesrv_conf_values(args.config))
        scan_ms = scan_interval_of(values, args.config) or scan_ms
    values["listenPort"] = str(port)
    settings = (values, args.config, scan_ms)
    aio.run(serve(args.host, port, acl, controller, metrics, settings, **options), args.event_loop)
    return 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("namesrv", help="run a name server (foreground)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; an address beyond loopback needs "
        "--acl-file, or --insecure to accept an open name server)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow listening beyond loopback without --acl-file (anyone who reaches the port "
        "can register and unregister brokers and change routes)",
    )
    p.add_argument("--listen-port", type=int, default=9876, help="TCP port (default 9876)")
    p.add_argument(
        "-c",
        "--config",
        default=None,
        help="namesrv.conf: listenPort, enableControllerInNamesrv=true and the "
        "embedded controller's keys (broker/controller/config.py)",
    )
    _add_connection_arguments(p)
    p.add_argument(
        "--acl-file",
        default=None,
        help="plain_acl.yml: check every request's ACL signature (off when not given)",
    )
    p.set_defaults(func=run)


def _add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """How the listener treats its connections: limits, TLS and the event loop."""
    p.add_argument(
        "--idle-timeout-seconds",
        type=int,
        default=DEFAULT_IDLE_TIMEOUT_MS // 1000,
        help="close a connection silent this long (RocketMQ's serverChannelMaxIdleTimeSeconds, "
        "default 120)",
    )
    p.add_argument(
        "--frame-read-timeout-ms",
        type=int,
        default=DEFAULT_FRAME_READ_TIMEOUT_MS,
        help="drop a peer whose frame is not whole this long after its first byte (default 30000)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help=f"connections accepted at once (default {DEFAULT_MAX_CONNECTIONS})",
    )
    p.add_argument(
        "--max-connections-per-host",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS_PER_HOST,
        help="connections accepted at once from one remote address "
        f"(default {DEFAULT_MAX_CONNECTIONS_PER_HOST})",
    )
    p.add_argument(
        "--max-pending-bytes",
        type=int,
        default=DEFAULT_MAX_PENDING_BYTES,
        help="bytes of partial frames held over all connections; above it the oldest partial "
        f"frames are dropped (default {DEFAULT_MAX_PENDING_BYTES})",
    )
    p.add_argument(
        "--tls-mode",
        default="disabled",
        choices=[m.value for m in TlsMode],
        help="RocketMQ's tlsMode: disabled (default), permissive (plain and TLS on one port) "
        "or enforcing (TLS only)",
    )
    p.add_argument("--tls-cert", help="PEM certificate (chain) for TLS")
    p.add_argument("--tls-key", help="PEM private key for TLS")
    p.add_argument(
        "--tls-key-password-file",
        help="file whose first line is the TLS key's pass phrase (else "
        "$HAPROOF_TLS_KEY_PASSWORD; an encrypted key never prompts)",
    )
    p.add_argument(
        "--event-loop",
        choices=[k.value for k in aio.EventLoop],
        default=aio.EventLoop.UVLOOP.value,
        help="asyncio event loop (default uvloop)",
    )


if __name__ == "__main__":
    import sys

    from broker.cli import main

    sys.exit(main(["namesrv", *sys.argv[1:]]))
