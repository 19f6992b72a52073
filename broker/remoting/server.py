"""asyncio remoting server: a processor table code -> async handler (conn, request)."""

from __future__ import annotations

import asyncio
import logging

from broker.remoting.connection import Connection, Handler

log = logging.getLogger(__name__)


class RemotingServer:
    """Create with RemotingServer(processors), then ``await server.start(host, port)``."""

    def __init__(self, processors: dict[int, Handler] | None = None) -> None:
        self.processors: dict[int, Handler] = dict(processors or {})
        self.connections: set[Connection] = set()
        self._server: asyncio.AbstractServer | None = None
        self.port: int | None = None

    def register(self, code: int, handler: Handler) -> None:
        self.processors[int(code)] = handler

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> RemotingServer:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self.processors, self.connections), host, port
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("remoting server listening on %s:%d", host, self.port)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            await conn.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
