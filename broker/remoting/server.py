"""asyncio remoting server: a processor table code -> async handler (conn, request), behind
the transport limits of ``limits.py`` and optional TLS (``tls.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import ssl

from broker.remoting.connection import Connection, Handler
from broker.remoting.limits import Clock, ConnectionGuard, ServerLimits, fit_to_fd_limit
from broker.remoting.tls import TLS_RECORD_HANDSHAKE, TlsMode

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 1024


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "" / a name: may be any interface


def exposure_refusal(what: str, host: str, acl_enable: bool, insecure: bool) -> str | None:
    """Why ``what`` may not listen on ``host`` (None: it may): beyond loopback it needs ACL, or
    an explicit ``insecure`` setting that says the network is trusted instead."""
    if is_loopback(host) or acl_enable or insecure:
        return None
    return (
        f"{what} would listen on {host or 'all interfaces'} (beyond loopback) with ACL off: "
        "anyone who reaches it could send, consume, reset offsets and change routes; turn ACL "
        "on, listen on 127.0.0.1, or set insecure to accept that"
    )


def warn_if_exposed(what: str, host: str, acl_enable: bool) -> bool:
    """The loud start-up warning for a node reachable beyond this machine with ACL off."""
    if is_loopback(host) or acl_enable:
        return False
    log.warning(
        "!!! %s listens on %s (beyond loopback) with ACL OFF: anyone who can reach this address "
        "can send, consume, reset offsets and change routes. Set aclEnable=true, or listen on "
        "127.0.0.1 (listenHost / --host) !!!",
        what, host or "all interfaces",
    )  # fmt: skip
    return True


class RemotingServer:
    """Create with RemotingServer(processors), then ``await server.start(host, port)``."""

    def __init__(
        self,
        processors: dict[int, Handler] | None = None,
        limits: ServerLimits | None = None,
        *,
        tls_mode: TlsMode = TlsMode.DISABLED,
        ssl_context: ssl.SSLContext | None = None,
        clock: Clock | None = None,
    ) -> None:
        if tls_mode is not TlsMode.DISABLED and ssl_context is None:
            raise ValueError(f"tlsMode {tls_mode.value} needs an SSL context")
        self.processors: dict[int, Handler] = dict(processors or {})
        self.guard = ConnectionGuard(limits, clock) if clock else ConnectionGuard(limits)
        self.connections: set[Connection] = self.guard.connections
        self.tls_mode, self.ssl_context = tls_mode, ssl_context
        self._server: asyncio.AbstractServer | None = None
        self._listener: socket.socket | None = None  # permissive mode's own accept loop
        self._tasks: set[asyncio.Task] = set()
        self._sniffing = 0  # accepted in permissive mode, first byte not seen yet
        self.port: int | None = None

    @property
    def limits(self) -> ServerLimits:
        return self.guard.limits

    def register(self, code: int, handler: Handler) -> None:
        self.processors[int(code)] = handler

    def _protocol(self) -> Connection:
        return Connection(self.processors, self.guard)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> RemotingServer:
        loop = asyncio.get_running_loop()
        self.guard.limits = fit_to_fd_limit(self.guard.limits)
        if self.tls_mode is not TlsMode.DISABLED:
            # our own accept loop: the first byte is peeked (permissive: TLS or plain; enforcing:
            # plain bytes refused at once) and handshakes count against max_connections
            self._listener = _listen(host, port)
            self.port = self._listener.getsockname()[1]
            self._spawn(self._accept_loop())
        else:
            self._server = await loop.create_server(
                self._protocol, host, port, backlog=LISTEN_BACKLOG
            )
            self.port = self._server.sockets[0].getsockname()[1]
        self._spawn(self._sweep_forever())
        log.info("remoting server listening on %s:%d (TLS %s)", host, self.port,
                 self.tls_mode.value)  # fmt: skip
        return self

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep_forever(self) -> None:
        interval_s = self.limits.sweep_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)  # a periodic timer, not a synchronisation
            self.guard.sweep()

    # -- TLS: plain and TLS on one port (permissive), or TLS only (enforcing) ----------------

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, addr = await loop.sock_accept(self._listener)
            except OSError as exc:  # EMFILE and friends: say so, keep serving the others
                log.warning("remoting: accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            peer = f"{addr[0]}:{addr[1]}"
            if len(self.guard.connections) + self._sniffing >= self.limits.max_connections:
                self.guard.refusals.refuse("refused connection from", peer,
                    f"connection limit {self.limits.max_connections} reached")  # fmt: skip
                sock.close()
                continue
            self._spawn(self._sniff(sock, peer))

    async def _sniff(self, sock: socket.socket, peer: str) -> None:
        """Wait (bounded) for the first byte, then serve the socket plain or as TLS. Counted
        against max_connections until served, the TLS handshake included."""
        self._sniffing += 1
        try:
            first = await self._first_byte(sock, peer)
            if first is None:
                return
            tls = first == TLS_RECORD_HANDSHAKE
            if not tls and self.tls_mode is TlsMode.ENFORCING:
                self.guard.refusals.refuse(
                    "dropped", peer, "plain bytes on a TLS-only port (tlsMode=enforcing)"
                )
                sock.close()
                return
            try:
                await asyncio.get_running_loop().connect_accepted_socket(
                    self._protocol, sock, ssl=self.ssl_context if tls else None,
                    ssl_handshake_timeout=self.limits.frame_read_timeout_ms / 1000 if tls else None,
                )  # fmt: skip
            except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
                # the transport that failed closes the socket itself
                self.guard.refusals.refuse("dropped", peer, f"TLS handshake failed: {exc!r}")
        finally:
            self._sniffing -= 1

    async def _first_byte(self, sock: socket.socket, peer: str) -> int | None:
        """The first byte the peer sent (left in the socket), or None when it sent none within
        the frame read deadline (the socket is then closed)."""
        loop = asyncio.get_running_loop()
        fd = sock.fileno()
        readable = loop.create_future()
        loop.add_reader(fd, lambda: readable.done() or readable.set_result(None))
        try:
            async with asyncio.timeout(self.limits.frame_read_timeout_ms / 1000):
                await readable
            first = sock.recv(1, socket.MSG_PEEK)
        except (TimeoutError, OSError) as exc:
            loop.remove_reader(fd)
            self.guard.refusals.refuse("dropped", peer, f"no first byte: {exc!r}")
            sock.close()
            return None
        except asyncio.CancelledError:  # the server stops
            loop.remove_reader(fd)
            sock.close()
            raise
        loop.remove_reader(fd)
        if not first:  # closed without a byte
            sock.close()
            return None
        return first[0]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for conn in list(self.connections):
            await conn.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        self._listener = None


def _listen(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)  # fmt: skip
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError:
        with contextlib.suppress(OSError):
            sock.close()
        raise
    return sock
