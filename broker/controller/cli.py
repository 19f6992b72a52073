"""``haproof controller -c controller.conf``: a standalone controller (RocketMQ's
ControllerStartup), and the hook the name server calls when ``enableControllerInNamesrv=true``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from broker.controller.config import ControllerConfig, load_controller_config
from broker.controller.node import ControllerNode
from broker.remoting.server import RemotingServer

log = logging.getLogger(__name__)


async def serve(config: ControllerConfig) -> None:
    node = ControllerNode(config)
    exporter = None
    settings = config.metrics_settings("controller.conf")
    if settings.enabled:  # metricsExporterType=PROM; before the port opens
        from broker.metrics.controller_metrics import ControllerMetrics
        from broker.metrics.exporter import MetricsService

        node_id = f"{config.listenHost}:{config.listenPort}"
        snapshot = ControllerMetrics(node.controller, node.refusals, node_id).snapshot
        exporter = MetricsService("the controller", settings, snapshot)
        await exporter.start()
    await node.start()
    log.info(
        "controller listening on %s:%d (%s)",
        config.listenHost,
        node.server.port,
        config.controllerType,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if exporter is not None:
        await exporter.stop()
    await node.stop()


async def embed_in_namesrv(config: ControllerConfig, server: RemotingServer) -> ControllerNode:
    """The name server's hook: the controller answers on the name server's port."""
    return await ControllerNode(config).start(server)


def run(args: argparse.Namespace) -> int:
    config = load_controller_config(args.config)  # ConfigError: one line, exit 2
    if args.listen_port is not None:
        config.listenPort = args.listen_port
    asyncio.run(serve(config))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "controller",
        help="run a RocketMQ 5 compatible controller (foreground): elects masters from the "
        "SyncStateSet, allocates broker ids",
    )
    p.add_argument("-c", "--config", required=True, help="controller.conf (ControllerConfig keys)")
    p.add_argument("--listen-port", type=int, default=None, help="override listenPort")
    p.set_defaults(func=run)


NAMESRV_KEYS = frozenset(
    "listenPort enableControllerInNamesrv rocketmqHome kvConfigPath configStorePath "
    "orderMessageEnable clusterTest productEnvName returnOrderTopicConfigToBroker "
    "serverChannelMaxIdleTimeSeconds metricsExporterType metricsPromExporterHost "
    "metricsPromExporterPort".split()
)


def read_namesrv_conf(path: str) -> tuple[int | None, ControllerConfig | None]:
    """The name server's config file: its listenPort, and the embedded controller's settings
    when ``enableControllerInNamesrv=true`` (the controller's keys share the file)."""
    from pathlib import Path

    from broker.config_file import parse_properties
    from contracts.errors import ConfigError

    try:
        lines = parse_properties(Path(path).read_text(), path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the name server config: {exc}") from exc
    values = {line.key: line.value for line in lines}
    port = int(values["listenPort"]) if values.get("listenPort", "").isdigit() else None
    if values.get("enableControllerInNamesrv", "false").lower() != "true":
        return port, None
    config = load_controller_config(path, ignored=NAMESRV_KEYS - {"listenPort"})
    if port is not None:
        config.listenPort = port
    return port, config
