"""Who may use a master's HA port: only its slaves.

- An address allow-list, ``haAllowedSlaves`` (IPs or networks). Unset: loopback only when ACL is
  off (a slave elsewhere needs the key), anyone who passes the handshake when ACL is on.
- With ``aclEnable``, the master sends a fresh nonce and the slave answers a signed handshake
  frame (broker/ha/wire.py): an admin account of plain_acl.yml (the brokers' own keys), a
  scheme-2 signature under the HA handshake's own purpose over this connection's nonce (so a
  captured handshake authorises neither another connection nor any remoting request), a
  timestamp within ``CLOCK_SKEW_MAX_MS`` of the master's clock, all within
  ``HANDSHAKE_TIMEOUT_MS``.

A refused peer gets nothing (the connection is closed before any byte is sent) and is logged
once per address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import time

from broker.acl.signing import (
    ACCESS_KEY,
    HA_PURPOSE,
    SIGN_NONCE,
    SIGN_TIMESTAMP,
    signature_v2_matches,
)
from broker.config_checks import ha_allowed_networks
from broker.ha import wire

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_MS = 5000
CLOCK_SKEW_MAX_MS = 60_000
MAX_LOGGED_PEERS = 1024
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class HAAdmission:
    """Built by HAService from the node's config and ACL checker (``node.acl``)."""

    def __init__(self, config, acl=None, clock_ms=wall_ms) -> None:
        self.acl = acl  # broker.acl.permission.AclChecker or None
        self.clock_ms = clock_ms
        if config.ha_allowed_slaves:
            self.networks = tuple(ha_allowed_networks(config.ha_allowed_slaves))
        else:
            self.networks = None if acl is not None else LOOPBACK
        self._logged: set[str] = set()
        self.refused = 0

    def address_refusal(self, host: str) -> str | None:
        if self.networks is None:
            return None
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return f"{host!r} is not an IP address"
        if any(addr in net for net in self.networks):
            return None
        if self.networks is LOOPBACK:
            return "not a loopback address (haAllowedSlaves unset and ACL off: loopback only)"
        return "not in haAllowedSlaves"

    async def handshake(self, reader, writer) -> str:
        """Send this connection's nonce, read and check the signed handshake; returns the
        slave's node name. Raises HAProtocolError (or TimeoutError / IncompleteReadError) when
        it is not acceptable."""
        nonce = secrets.token_hex(wire.CHALLENGE_NONCE_CHARS // 2)
        async with asyncio.timeout(HANDSHAKE_TIMEOUT_MS / 1000):
            writer.write(wire.build_challenge(nonce))
            await writer.drain()
            size = wire.read_handshake_head(await reader.readexactly(wire.HANDSHAKE_HEAD.size))
            fields = wire.read_handshake_payload(await reader.readexactly(size))
        problem = self._handshake_problem(fields, nonce)
        if problem is not None:
            raise wire.HAProtocolError(f"HA handshake refused: {problem}")
        return fields.get("NodeName", "")

    def _handshake_problem(self, fields: dict[str, str], nonce: str) -> str | None:
        ak = fields.get(ACCESS_KEY, "")
        account = self.acl.acl.accounts.get(ak)
        if account is None:
            return f"no ACL account {ak[:64]!r}"
        if fields.get(SIGN_NONCE) != nonce:
            return "the handshake is not signed over this connection's nonce (replayed?)"
        if not signature_v2_matches(HA_PURPOSE, 0, fields, None, account.secret_key):
            return f"signature mismatch for {ak!r}"
        if not account.admin:
            return f"{ak!r} is not an admin account (only brokers replicate)"
        if fields.get("Purpose") != wire.HANDSHAKE_PURPOSE:
            return "not an HA handshake"
        try:
            skew_ms = abs(self.clock_ms() - int(fields.get(SIGN_TIMESTAMP, "")))
        except ValueError:
            return "no Timestamp"
        if skew_ms > CLOCK_SKEW_MAX_MS:
            return f"Timestamp {skew_ms} ms away from this master's clock (replayed?)"
        return None

    def log_refusal(self, peer: str, host: str, reason: str) -> None:
        """Once per address: a peer retrying every 100 ms is one line."""
        self.refused += 1
        if host in self._logged or len(self._logged) >= MAX_LOGGED_PEERS:
            return
        self._logged.add(host)
        log.warning("HA: refused connection from %s: %s", peer, reason)


def handshake_frame(signer, node_name: str, master_nonce: str) -> bytes:
    """The slave's signed answer to the master's challenge (``signer``: AclSigner)."""
    fields = {"NodeName": node_name, "Purpose": wire.HANDSHAKE_PURPOSE}
    signer.sign_ha_handshake(fields, master_nonce)
    return wire.build_handshake(fields)
