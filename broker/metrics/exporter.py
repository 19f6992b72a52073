"""The Prometheus endpoint of a node process: RocketMQ 5's keys (BrokerConfig, ControllerConfig;
haproof reads the same three in namesrv.conf) and a bounded HTTP server.

- ``metricsExporterType``: ``DISABLE`` (default) or ``PROM``; RocketMQ's ``OTLP_GRPC`` and
  ``LOG`` are refused with one line (haproof has no OpenTelemetry SDK).
- ``metricsPromExporterHost``: the address to listen on. RocketMQ's default is brokerIP1;
  haproof's is 127.0.0.1, like its other listeners (the endpoint has no authentication: an
  address beyond loopback is logged as a warning at start).
- ``metricsPromExporterPort``: default 5557, as RocketMQ.

The server is prometheus_client's (its WSGI app, its threading server, the standard library's
HTTP parsing: the request line and headers are bounded there), with two bounds of ours: at most
``MAX_SCRAPES`` connections served at once (one more is closed at once) and ``READ_TIMEOUT_S``
for a request to arrive. What a scrape returns is computed in the node's event loop
(``LoopCollector``), never by reading the node's tables from the HTTP thread.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler
from prometheus_client.metrics_core import Metric

from broker.remoting.server import is_loopback
from contracts.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_PORT = 5557  # RocketMQ's metricsPromExporterPort
DEFAULT_HOST = "127.0.0.1"
MAX_SCRAPES = 8
READ_TIMEOUT_S = 5.0
COLLECT_TIMEOUT_S = 5.0


class MetricsExporterType(enum.Enum):
    """RocketMQ's MetricsExporterType names; haproof serves DISABLE and PROM."""

    DISABLE = 0
    OTLP_GRPC = 1
    PROM = 2
    LOG = 3


@dataclass(frozen=True)
class MetricsSettings:
    exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    host: str = ""  # "": DEFAULT_HOST
    port: int = DEFAULT_PORT

    @property
    def enabled(self) -> bool:
        return self.exporter_type is MetricsExporterType.PROM

    @property
    def bind_host(self) -> str:
        return self.host or DEFAULT_HOST


def metrics_problem(exporter_type: MetricsExporterType, port: int) -> tuple[str, str] | None:
    """(key, what is wrong) for settings haproof cannot serve; None when they are fine."""
    if exporter_type in (MetricsExporterType.OTLP_GRPC, MetricsExporterType.LOG):
        return (
            "metricsExporterType",
            f"{exporter_type.name} is not served by haproof: use PROM (a Prometheus endpoint) "
            "or DISABLE",
        )
    if not 0 <= port <= 65535:
        return "metricsPromExporterPort", f"{port} is not a TCP port (0-65535)"
    return None


def settings_from_properties(values: dict[str, str], source: str) -> MetricsSettings:
    """The three keys from a properties file's values (namesrv.conf, controller.conf)."""
    raw_type = values.get("metricsExporterType", "DISABLE").strip()
    try:
        kind = MetricsExporterType[raw_type.upper()]
    except KeyError:
        names = ", ".join(m.name for m in MetricsExporterType)
        raise ConfigError(
            f"{source}: metricsExporterType={raw_type!r}: expected one of {names}"
        ) from None
    raw_port = values.get("metricsPromExporterPort", str(DEFAULT_PORT)).strip()
    if not raw_port.isdigit():
        raise ConfigError(f"{source}: metricsPromExporterPort={raw_port!r}: expected a TCP port")
    problem = metrics_problem(kind, int(raw_port))
    if problem is not None:
        raise ConfigError(f"{source}: {problem[0]}: {problem[1]}")
    return MetricsSettings(kind, values.get("metricsPromExporterHost", "").strip(), int(raw_port))


def settings_from_file(path: str) -> MetricsSettings:
    """The three keys of a properties file (the name server's namesrv.conf)."""
    from pathlib import Path

    from broker.config_file import parse_properties

    try:
        lines = parse_properties(Path(path).read_text(), path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return settings_from_properties({line.key: line.value for line in lines}, path)


class LoopCollector:
    """A prometheus_client collector whose families are built by ``snapshot`` in ``loop`` (the
    node's event loop) at each scrape, waited for at most COLLECT_TIMEOUT_S."""

    def __init__(
        self,
        snapshot: Callable[[], Awaitable[list[Metric]]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._snapshot = snapshot
        self._loop = loop

    def describe(self) -> Iterable[Metric]:
        return ()  # registering must not collect (it runs in the loop's own thread)

    def collect(self) -> Iterable[Metric]:
        future = asyncio.run_coroutine_threadsafe(self._snapshot(), self._loop)
        return future.result(timeout=COLLECT_TIMEOUT_S)


class _Handler(_SilentHandler):
    timeout = READ_TIMEOUT_S  # socket timeout for the request to arrive (and be written)


class _BoundedServer(ThreadingWSGIServer):
    """prometheus_client's thread-per-request server, at most MAX_SCRAPES at once."""

    def __init__(self, *args, **kwargs) -> None:
        self._slots = threading.BoundedSemaphore(MAX_SCRAPES)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many scrapes in progress: closed at once
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def handle_error(self, request, client_address) -> None:
        # a scraper too slow or gone: one line, not socketserver's traceback on stderr
        log.info("metrics: connection from %s dropped: %r", client_address[0], sys.exc_info()[1])

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _BoundedServer6(_BoundedServer):
    address_family = socket.AF_INET6


class PromEndpoint:
    """``start()`` serves ``collector``'s families on host:port (``/metrics``, any path, as
    prometheus_client does); ``port`` is the bound one (port 0: ephemeral, in tests)."""

    def __init__(self, what: str, settings: MetricsSettings) -> None:
        self.what = what
        self.settings = settings
        self.registry = CollectorRegistry(auto_describe=False)
        self._httpd = None
        self._thread: threading.Thread | None = None
        self.port = settings.port

    def start(self, collector) -> None:
        host = self.settings.bind_host
        self.registry.register(collector)
        server_class = _BoundedServer6 if ":" in host else _BoundedServer
        try:
            httpd = make_server(
                host,
                self.settings.port,
                make_wsgi_app(self.registry),
                server_class,
                handler_class=_Handler,
            )
        except OSError as exc:
            raise ConfigError(
                f"{self.what}: cannot serve metrics on {host}:{self.settings.port} "
                f"(metricsPromExporterHost/metricsPromExporterPort): {exc.strerror or exc}"
            ) from exc
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever, name=f"metrics-{self.port}", daemon=True
        )
        self._thread.start()
        if not is_loopback(host):
            log.warning(
                "%s: the metrics endpoint on %s:%d has no authentication: anyone who reaches "
                "it reads topic and group names and the node's figures",
                self.what,
                host,
                self.port,
            )
        log.info("%s: Prometheus metrics on http://%s:%d/metrics", self.what, host, self.port)

    async def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        await asyncio.to_thread(httpd.shutdown)  # serve_forever returns within its poll
        httpd.server_close()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)


class MetricsService:
    """A node service serving ``snapshot``'s families while the node runs (a broker's
    ``NodeService``; the name server and the controller start and stop it the same way)."""

    def __init__(
        self, what: str, settings: MetricsSettings, snapshot: Callable[[], Awaitable[list]]
    ) -> None:
        self.endpoint = PromEndpoint(what, settings)
        self._snapshot = snapshot

    async def start(self) -> None:
        collector = LoopCollector(self._snapshot, asyncio.get_running_loop())
        self.endpoint.start(collector)

    async def stop(self) -> None:
        await self.endpoint.stop()

    def handlers(self) -> dict:
        return {}

    def runtime_info(self) -> dict[str, object]:
        return {"metricsPromExporterPort": self.endpoint.port}
