"""The fault proxy itself, against a real echo server on 127.0.0.1."""

from __future__ import annotations

import asyncio

from tests.support.aio import async_test
from tools.faultproxy import FaultProxy


async def _echo_server():
    async def echo(reader, writer):
        try:
            while data := await reader.read(4096):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _ends(reader) -> bytes | type:
    """What a read returns once the proxy cut the connection: b"" (FIN) or the error type."""
    try:
        async with asyncio.timeout(10):
            return await reader.read(100)
    except ConnectionError as exc:
        return type(exc)


@async_test
async def test_forwards_drops_resets_half_closes_delays_and_blackholes():
    server, port = await _echo_server()
    proxy = await FaultProxy.start("127.0.0.1", port)
    try:
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(b"hello")
        assert await asyncio.wait_for(r.readexactly(5), 10) == b"hello"
        assert proxy.active == 1

        proxy.drop()
        assert await _ends(r) == b""
        w.close()

        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(b"x")
        assert await asyncio.wait_for(r.readexactly(1), 10) == b"x"
        proxy.reset()
        assert await _ends(r) in (ConnectionResetError, b"")
        w.close()

        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(b"y")
        assert await asyncio.wait_for(r.readexactly(1), 10) == b"y"
        proxy.half_close()
        assert await _ends(r) == b""  # the client sees EOF, its own side stays writable
        w.write(b"still")
        await w.drain()
        w.close()

        proxy.set_delay_ms(300)
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        t0 = asyncio.get_running_loop().time()
        w.write(b"z")
        assert await asyncio.wait_for(r.readexactly(1), 10) == b"z"
        assert asyncio.get_running_loop().time() - t0 >= 0.55  # 300 ms each way
        proxy.set_delay_ms(0)

        proxy.blackhole(True)
        w.write(b"lost")
        await w.drain()
        try:
            async with asyncio.timeout(0.5):
                got = await r.read(10)
        except TimeoutError:
            got = None
        assert got is None
        proxy.blackhole(False)
        w.write(b"back")
        assert await asyncio.wait_for(r.readexactly(4), 10) == b"back"
        w.close()
        assert proxy.accepted == 4
    finally:
        await proxy.stop()
        server.close()
        await server.wait_closed()
