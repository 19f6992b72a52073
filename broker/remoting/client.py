"""asyncio remoting client: one Connection per address, created by a factory coroutine."""

from __future__ import annotations

import asyncio
import ssl as _ssl
from collections.abc import Callable

from broker.remoting.command import RemotingCommand
from broker.remoting.connection import Connection, ConnectionClosedError, Handler


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


async def connect(
    addr: str,
    processors: dict[int, Handler] | None = None,
    timeout_ms: int = 3000,
    ssl: _ssl.SSLContext | None = None,
) -> Connection:
    """Open a connection to ``host:port`` (over TLS with ``ssl``, the handshake within
    ``timeout_ms``); processors answer server -> client requests."""
    host, port = split_addr(addr)
    try:
        # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
        async with asyncio.timeout(timeout_ms / 1000):
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(
                lambda: Connection(dict(processors or {})),
                host,
                port,
                ssl=ssl,
                server_hostname=host if ssl is not None else None,
            )
    except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
        raise ConnectionClosedError(f"{addr}: cannot connect: {exc!r}") from exc
    return conn


RpcHook = Callable[[RemotingCommand], None]  # e.g. broker.acl.signing.AclSigner


class RemotingClient:
    """Connections pooled by address. ``RemotingClient()`` does no I/O; connections open lazily.
    ``ssl``: every connection over TLS, verified with this context. ``rpc_hook`` (RocketMQ's
    RPCHook, e.g. an ACL signer) sees every request before it is sent."""

    def __init__(
        self,
        processors: dict[int, Handler] | None = None,
        ssl: _ssl.SSLContext | None = None,
        rpc_hook: RpcHook | None = None,
    ) -> None:
        self.processors = dict(processors or {})
        self.ssl = ssl
        self.rpc_hook = rpc_hook
        self._conns: dict[str, Connection] = {}
        self._lock = asyncio.Lock()

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed.is_set():
            return conn  # the common case, without the lock
        async with self._lock:
            conn = self._conns.get(addr)
            if conn is None or conn.closed.is_set():
                conn = await connect(addr, self.processors, ssl=self.ssl)
                self._conns[addr] = conn
            return conn

    async def invoke(
        self, addr: str, request: RemotingCommand, timeout_ms: int = 3000
    ) -> RemotingCommand:
        conn = await self.connection(addr)
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        return await conn.invoke(request, timeout_ms)

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        conn = await self.connection(addr)
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        await conn.invoke_oneway(request)

    async def close(self) -> None:
        for conn in list(self._conns.values()):
            await conn.close()
        self._conns.clear()
