"""The parts a broker node is assembled from, each built here from the config: the ACL checker
and signer, the TLS context and signer of the node's own connections (``PeerLinks``), the
stable node name, the remoting server, the listeners told of a truncation, topic auto-creation.
``broker/node.py`` builds them once and hands each subsystem the ones it needs."""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from broker.acl.permission import AclChecker
from broker.acl.signing import AclSigner
from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import BrokerConfig
from broker.live_config import LiveConfig
from broker.node_service import NodeService
from broker.processors.names import topic_problem
from broker.remoting import tls
from broker.remoting.client import RemotingClient
from broker.remoting.limits import ServerLimits
from broker.remoting.server import RemotingServer
from broker.remoting.tls import TlsMode
from broker.store.checkpoint import atomic_write
from broker.store.message_store import MessageStore

__all__ = ["HaTls", "NodeService", "PeerLinks", "TopicAutoCreate", "TruncationListeners"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HaTls:
    """The HA stream's TLS (tlsMode=enforcing): the master's listener serves TLS only with
    remoting's certificate and key, a slave connects with remoting's trust certificate."""

    server: ssl.SSLContext
    client: ssl.SSLContext


@dataclass(frozen=True)
class PeerLinks:
    """How this node connects to its peers (name servers, other brokers): ``tls`` with
    tlsEnable, ``signer`` with ACL keys, ``ha_tls`` with tlsMode=enforcing; None when off."""

    tls: ssl.SSLContext | None = None
    signer: AclSigner | None = None
    ha_tls: HaTls | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig, signer: AclSigner | None) -> PeerLinks:
        """Reads the certificates (a factory's I/O, not a constructor's): the trust certificate
        when tlsEnable; with tlsMode=enforcing also remoting's certificate and key, for HA."""
        ctx = tls.client_context(config.tls_client_trust_cert_path) if config.tls_enable else None
        ha_tls = None
        if config.tls_mode is TlsMode.ENFORCING:
            client = ctx or tls.client_context(config.tls_client_trust_cert_path)
            ha_tls = HaTls(server_tls_context(config), client)
        return cls(ctx, signer, ha_tls)

    def client(self) -> RemotingClient:
        return RemotingClient(ssl=self.tls, rpc_hook=self.signer)


def acl_checker(config: BrokerConfig) -> AclChecker | None:
    """The request checker when ``aclEnable`` (plain_acl.yml read now: a bad file stops the start
    with a ConfigError naming it)."""
    if not config.acl_enable:
        return None
    return AclChecker.from_file(config.acl_file)


def acl_signer(config: BrokerConfig, environ=os.environ) -> AclSigner | None:
    """This node's own ACL signer, or None: ``accessKey`` / ``secretKey`` from broker.conf, else
    from the environment (``HAPROOF_ACCESS_KEY`` / ``HAPROOF_SECRET_KEY``: a deployment keeps
    the secret out of the config file, e.g. docker-compose.yml)."""
    ak = config.access_key or environ.get("HAPROOF_ACCESS_KEY")
    sk = config.secret_key or environ.get("HAPROOF_SECRET_KEY")
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


def server_tls_context(config: BrokerConfig) -> ssl.SSLContext:
    """The server side of TLS (remoting; HA under enforcing): tlsServerCertPath/KeyPath."""
    password = tls.key_password(config.tls_server_key_password, config.tls_server_key_password_file)
    return tls.server_context(config.tls_server_cert_path, config.tls_server_key_path, password)


def remoting_server(
    config: BrokerConfig, processors: dict, clock: Clock = SYSTEM_CLOCK
) -> RemotingServer:
    ctx = None
    if config.tls_mode is not TlsMode.DISABLED:
        ctx = server_tls_context(config)
    return RemotingServer(
        processors,
        ServerLimits.from_config(config),
        tls_mode=config.tls_mode,
        ssl_context=ctx,
        clock=clock,
    )


class TruncationListeners:
    """Who is told when this node cut its commit log back (a rejoin, a torn tail):
    ``listener(from_offset, to_offset)``; a failing listener is logged, the others still hear."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[int, int], None]] = []

    def add(self, listener: Callable[[int, int], None]) -> None:
        self._listeners.append(listener)

    def notify(self, from_offset: int, to_offset: int) -> None:
        for listener in list(self._listeners):
            try:
                listener(from_offset, to_offset)
            except Exception:
                log.exception("truncation listener %r failed", listener)


class TopicAutoCreate:
    """A send to a topic this node does not hold: the topic is created from the default topic
    (TBW102) when ``autoCreateTopicEnable`` and the template inherits; ``on_created()`` then
    tells the name servers (the node's registration)."""

    def __init__(self, store: MessageStore, config: LiveConfig, on_created: Callable[[], None]):
        self.store = store
        self.config = config
        self._on_created = on_created

    def ensure_default_topic(self) -> None:
        """TBW102 exists while auto-creation is on (a node's start)."""
        if self.config.auto_create_topic_enable:
            self.store.topic_config.ensure_default(self.config.default_topic_queue_nums)

    def ensure_topic(self, topic: str, default_topic: str | None, queue_nums: int) -> dict | None:
        """The topic's config; created from the default topic (auto-create) when allowed."""
        topics = self.store.topic_config
        tc = topics.get(topic)
        if tc is not None:
            return tc
        if topic_problem(topic) is not None:
            return None  # the dispatch guard refuses such names first; never a table key
        if not self.config.auto_create_topic_enable:
            return None
        tc, created = topics.create_in_send(topic, default_topic, queue_nums)
        if created:
            self._on_created()
        return tc
