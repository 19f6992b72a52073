"""The parts a broker node is assembled from, each built here from the config: the ACL checker
and signer, the TLS context and signer of the node's own connections (``PeerLinks``), the
stable node name, the remoting server. ``broker/node.py`` builds them once and hands each
subsystem the ones it needs."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Protocol

from broker.acl.permission import AclChecker
from broker.acl.signing import AclSigner
from broker.config import BrokerConfig
from broker.remoting import tls
from broker.remoting.client import RemotingClient
from broker.remoting.limits import ServerLimits
from broker.remoting.server import RemotingServer
from broker.remoting.tls import TlsMode
from broker.store.checkpoint import atomic_write


class NodeService(Protocol):
    """A part the node starts (in order) and stops (in reverse). It may also have
    ``handlers() -> {request code: handler}`` and ``runtime_info() -> {key: value}``."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True)
class PeerLinks:
    """How this node connects to its peers (name servers, other brokers): ``tls`` with
    tlsEnable, ``signer`` with ACL keys; None when off."""

    tls: ssl.SSLContext | None = None
    signer: AclSigner | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig, signer: AclSigner | None) -> PeerLinks:
        """Reads the trust certificate when tlsEnable (a factory's I/O, not a constructor's)."""
        ctx = tls.client_context(config.tls_client_trust_cert_path) if config.tls_enable else None
        return cls(ctx, signer)

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


def remoting_server(config: BrokerConfig, processors: dict) -> RemotingServer:
    ctx = None
    if config.tls_mode is not TlsMode.DISABLED:
        password = tls.key_password(
            config.tls_server_key_password, config.tls_server_key_password_file
        )
        ctx = tls.server_context(config.tls_server_cert_path, config.tls_server_key_path, password)
    return RemotingServer(
        processors, ServerLimits.from_config(config), tls_mode=config.tls_mode, ssl_context=ctx
    )
