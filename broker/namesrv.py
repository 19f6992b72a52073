"""The name server: brokers register routes, clients look them up. ``haproof namesrv``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import signal
import struct
import zlib

from broker import aio
from broker.acl.permission import AclChecker
from broker.namesrv_routes import RouteInfoManager
from broker.processors.guard import guarded
from broker.processors.names import topic_problem
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
from contracts.errors import ConfigError, RemotingError
from contracts.fastjson import loads_fastjson

log = logging.getLogger(__name__)

SCAN_INTERVAL_MS = 10_000


def _decode_register_body(req: RemotingCommand) -> dict:
    if not req.body:
        return {}
    body = req.body
    if req.opt_field("compressed", "false").lower() == "true":
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise RemotingError(
                f"REGISTER_BROKER from {req.opt_field('brokerAddr')}: "
                f"compressed body does not inflate: {exc}"
            ) from exc
    if req.opt_field("compressed", "false").lower() == "true" and not body.lstrip().startswith(
        b"{"
    ):
        return _decode_java_compressed(body, req.opt_field("brokerAddr"))
    try:
        doc = loads_fastjson(body)
    except ValueError as exc:
        raise RemotingError(
            f"REGISTER_BROKER from {req.opt_field('brokerAddr')}: "
            f"body is not RegisterBrokerBody JSON: {exc}"
        ) from exc
    if not isinstance(doc, dict):
        raise RemotingError("REGISTER_BROKER: body is not a JSON object")
    return doc


_I32 = struct.Struct(">i")  # length / count prefix in the compressed RegisterBrokerBody


def _decode_java_compressed(data: bytes, broker_addr: str | None) -> dict:
    """RocketMQ's compressed RegisterBrokerBody, after inflating: [i32 len][DataVersion JSON]
    [i32 n] n x ([i32 len]["topicName read write perm filterType"]) [i32 len][filter list JSON]
    (5.x may append queue mappings: ignored)."""
    where = f"REGISTER_BROKER from {broker_addr}: compressed body"
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(data):
            raise RemotingError(f"{where}: truncated at byte {pos} (wanted {n} bytes)")
        out = data[pos : pos + n]
        pos += n
        return out

    def take_i32() -> int:
        return _I32.unpack(take(4))[0]

    try:
        version = loads_fastjson(take(take_i32()))
        table = {}
        for _ in range(take_i32()):
            fields = take(take_i32()).decode().split(" ")
            if len(fields) != 5:
                raise RemotingError(f"{where}: topic config {' '.join(fields)!r} is not 5 fields")
            name, read, write, perm = fields[0], *map(int, fields[1:4])
            table[name] = {
                "topicName": name,
                "readQueueNums": read,
                "writeQueueNums": write,
                "perm": perm,
            }
        filters = loads_fastjson(take(take_i32()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RemotingError(f"{where}: unreadable at byte {pos}: {exc}") from exc
    return {
        "topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": version},
        "filterServerList": filters,
    }


MAX_REGISTERED_TOPICS = 100_000  # per registration: more is not a broker's topic table
_NAME = re.compile(r"[%|a-zA-Z0-9_.:-]{1,255}")  # broker and cluster names


def _registration_problem(req: RemotingCommand, body: dict) -> str | None:
    """Why a REGISTER_BROKER must not touch the route tables: a bad name, address or number."""
    for name in ("brokerName", "clusterName"):
        value = req.field(name)
        if not _NAME.fullmatch(value):
            return f"{name} {value[:60]!r} is not 1-255 characters of [%|a-zA-Z0-9_.:-]"
    addr = req.field("brokerAddr")
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535 or len(addr) > 255:
        return f"brokerAddr {addr[:60]!r} is not host:port"
    if not 0 <= req.int_field("brokerId") < 1 << 31:
        return f"brokerId {req.int_field('brokerId')} is out of range"
    wrapper = body.get("topicConfigSerializeWrapper") or {}
    table = wrapper.get("topicConfigTable") if isinstance(wrapper, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict) or len(table) > MAX_REGISTERED_TOPICS:
        return f"topicConfigTable is not a table of at most {MAX_REGISTERED_TOPICS:,} topics"
    for topic, cfg in table.items():
        if topic_problem(str(topic)) is not None or not isinstance(cfg, dict):
            return f"topicConfigTable: {topic_problem(str(topic)) or f'{topic!r}: not an object'}"
        for key in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"):
            try:
                value = int(cfg.get(key, 0))
            except (TypeError, ValueError):
                return f"topicConfigTable: {topic} {key} {cfg.get(key)!r} is not a number"
            if not 0 <= value < 1 << 16:
                return f"topicConfigTable: {topic} {key} {value} is out of range"
    return None


class NameServer:
    """``acl``: with a checker (``--acl-file``), every request must be signed by an account of
    plain_acl.yml (registration and KV writes by an admin one), else NO_PERMISSION.
    ``server_options`` go to RemotingServer: limits, tls_mode, ssl_context."""

    def __init__(
        self,
        routes: RouteInfoManager | None = None,
        acl: AclChecker | None = None,
        **server_options,
    ) -> None:
        self.routes = routes or RouteInfoManager()
        # broker address -> the connection it last registered over (RocketMQ's
        # BrokerHousekeepingService: a broker whose channel closes leaves the routes at once,
        # so clients switch to its slave without waiting for the 120 s expiry)
        self._broker_conns: dict[str, object] = {}
        self._watchers: set[asyncio.Task] = set()
        self.server = RemotingServer(
            guarded(self._processors(), acl),  # broker/processors/guard.py: ACL, names
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
        }

    async def _register(self, conn, req: RemotingCommand) -> RemotingCommand:
        body = _decode_register_body(req)
        problem = _registration_problem(req, body)
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
        )
        self._watch(conn, req.field("clusterName"), req.field("brokerAddr"),
                    req.field("brokerName"), req.int_field("brokerId"))  # fmt: skip
        return req.make_response(
            ResponseCode.SUCCESS,
            ext_fields={"masterAddr": result.master_addr, "haServerAddr": result.ha_server_addr},
        )

    def _watch(self, conn, cluster: str, addr: str, name: str, broker_id: int) -> None:
        if self._broker_conns.get(addr) is conn or not hasattr(conn, "closed"):
            return
        self._broker_conns[addr] = conn

        async def on_close() -> None:
            await conn.closed.wait()
            if self._broker_conns.get(addr) is conn:
                del self._broker_conns[addr]
                live = self.routes.live_table.get(addr)
                if live is not None:
                    log.info("broker %s (%s id %d) connection closed: removed", addr, name,
                             live.broker_id)  # fmt: skip
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

    async def scan_forever(self, interval_ms: int = SCAN_INTERVAL_MS) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            for addr in self.routes.scan_not_active():
                log.warning(
                    "broker %s expired: no registration within %d ms", addr, self.routes.expire_ms
                )


async def serve(
    host: str, port: int, acl: AclChecker | None = None, controller=None, **server_options
) -> None:
    ns = NameServer(acl=acl, **server_options)
    await ns.server.start(host, port)
    log.info("namesrv listening on %s:%d", host, ns.server.port)
    if controller is not None:  # enableControllerInNamesrv: broker/controller/ on this port
        from broker.controller.cli import embed_in_namesrv

        controller = await embed_in_namesrv(controller, ns.server)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    scanner = loop.create_task(ns.scan_forever())
    await stop.wait()
    log.info("namesrv shutting down")
    scanner.cancel()
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
    port, controller = args.listen_port, None
    if args.config:
        from broker.controller.cli import read_namesrv_conf

        conf_port, controller = read_namesrv_conf(args.config)
        port = conf_port if conf_port is not None and args.listen_port == 9876 else port
    aio.run(serve(args.host, port, acl, controller, **options), args.event_loop)
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
    p.add_argument("-c", "--config", default=None,
                   help="namesrv.conf: listenPort, enableControllerInNamesrv=true and the "
                   "embedded controller's keys (broker/controller/config.py)")  # fmt: skip
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
    p.add_argument(
        "--acl-file",
        default=None,
        help="plain_acl.yml: check every request's ACL signature (off when not given)",
    )
    p.set_defaults(func=run)


if __name__ == "__main__":
    import sys

    from broker.cli import main

    sys.exit(main(["namesrv", *sys.argv[1:]]))
