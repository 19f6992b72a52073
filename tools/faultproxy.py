"""A TCP proxy for fault injection between two real processes on 127.0.0.1.

    proxy = await FaultProxy.start("127.0.0.1", master_ha_port)
    ...point the slave at 127.0.0.1:proxy.port...
    proxy.drop()            # close every current connection (FIN both ways)
    proxy.reset()           # close every current connection with an RST (SO_LINGER 0)
    proxy.half_close()      # target → client side ends (client sees EOF); client → target flows
    proxy.set_delay_ms(n)   # every chunk is forwarded n ms after it arrived (order kept)
    proxy.blackhole(True)   # keep accepting, forward nothing (bytes are read and discarded)
    await proxy.stop()

New connections after a fault are proxied normally (unless blackholed), so a client that
reconnects gets through again. ``accepted`` counts connections ever accepted, ``active`` the
open ones.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

CHUNK = 64 * 1024
_LINGER_RST = struct.pack("ii", 1, 0)  # l_onoff=1, l_linger=0: close() sends an RST


class _Link:
    """One accepted client and its upstream connection, with a pump per direction."""

    def __init__(self, proxy: FaultProxy, c_reader, c_writer, u_reader, u_writer) -> None:
        self.proxy = proxy
        self.c_reader, self.c_writer = c_reader, c_writer
        self.u_reader, self.u_writer = u_reader, u_writer
        self.down_open = True  # target → client still forwarded
        self.tasks = [
            asyncio.create_task(self._pump(c_reader, u_writer, up=True)),
            asyncio.create_task(self._pump(u_reader, c_writer, up=False)),
        ]

    async def _pump(self, reader, writer, up: bool) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer))
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if self.proxy._blackhole or (not up and not self.down_open):
                    continue
                due = time.monotonic() + self.proxy._delay_ms / 1000
                queue.put_nowait((due, data))
            queue.put_nowait(None)
            await sender
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            pass
        finally:
            sender.cancel()

    async def _send(self, queue: asyncio.Queue, writer) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            due, data = item
            wait_s = due - time.monotonic()
            if wait_s > 0:
                await asyncio.sleep(wait_s)  # the injected latency itself
            writer.write(data)
            await writer.drain()

    def half_close(self) -> None:
        self.down_open = False
        if self.c_writer.can_write_eof() and not self.c_writer.is_closing():
            try:
                self.c_writer.write_eof()
            except OSError:
                pass

    def close(self, rst: bool = False) -> None:
        for w in (self.c_writer, self.u_writer):
            if rst:
                sock = w.get_extra_info("socket")
                if sock is not None:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
                    except OSError:
                        pass
                w.transport.abort()
            else:
                w.close()
        for t in self.tasks:
            t.cancel()


class FaultProxy:
    """Build with ``await FaultProxy.start(host, port)``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.accepted = 0
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task] = set()
        self._delay_ms = 0
        self._blackhole = False
        self._server: asyncio.Server | None = None

    @classmethod
    async def start(cls, target_host: str, target_port: int) -> FaultProxy:
        proxy = cls(target_host, target_port)
        proxy._server = await asyncio.start_server(proxy._accept, "127.0.0.1", 0)
        proxy.port = proxy._server.sockets[0].getsockname()[1]
        return proxy

    @property
    def active(self) -> int:
        return len(self._links)

    async def _accept(self, c_reader, c_writer) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        self._handlers.add(task)
        try:
            try:
                u_reader, u_writer = await asyncio.open_connection(*self.target)
            except OSError:
                c_writer.close()  # the target is down: the client sees its connection end
                return
            link = _Link(self, c_reader, c_writer, u_reader, u_writer)
            self._links.add(link)
            try:
                await asyncio.gather(*link.tasks, return_exceptions=True)
            finally:
                self._links.discard(link)
                link.close()
        finally:
            self._handlers.discard(task)

    # -- faults ---------------------------------------------------------------------------------

    def drop(self) -> None:
        for link in list(self._links):
            link.close()

    def reset(self) -> None:
        for link in list(self._links):
            link.close(rst=True)

    def half_close(self) -> None:
        for link in list(self._links):
            link.half_close()

    def set_delay_ms(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"delay must be >= 0 ms, got {n}")
        self._delay_ms = n

    def blackhole(self, on: bool) -> None:
        self._blackhole = on

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop()  # every handler then ends on its own (cancelling them upsets asyncio)
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
