"""Transport limits on a real server on 127.0.0.1, deadlines driven by an injected clock (the
server's own sweeper runs on a long period here; the tests call ``guard.sweep()`` themselves)."""

from __future__ import annotations

import asyncio
import functools
import logging
import struct

import pytest

from broker.clock import SYSTEM_CLOCK
from broker.remoting.client import connect
from broker.remoting.codec import encode_frame
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.limits import RefusalLog, ServerLimits
from broker.remoting.server import RemotingServer, is_loopback, warn_if_exposed
from tests.support.aio import async_test
from tests.support.waiting import wait_for


class FakeClock:
    """Deadlines read ``now`` (seconds, moved by the test); the server's sweeper still sleeps
    its real period (it runs ``sweep`` against this clock's time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def monotonic_ms(self) -> float:
        return self.now * 1000

    def wall_ms(self) -> int:
        return SYSTEM_CLOCK.wall_ms()

    async def sleep_ms(self, ms: float) -> None:
        await SYSTEM_CLOCK.sleep_ms(ms)


_poll = functools.partial(wait_for, timeout_ms=5_000)  # tests/support/waiting.py


async def _echo(conn, req):
    return req.make_response(ResponseCode.SUCCESS, ext_fields={"topic": req.field("topic")})


async def _hang(conn, req):
    await asyncio.Event().wait()


def _request(topic: str = "t") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


async def _server(clock: FakeClock, **limits) -> RemotingServer:
    limits.setdefault("idle_timeout_ms", 120_000)
    limits.setdefault("frame_read_timeout_ms", 30_000)
    server = RemotingServer(
        {RequestCode.GET_ROUTEINFO_BY_TOPIC: _echo, RequestCode.HEART_BEAT: _hang},
        ServerLimits(**limits),
        clock=clock,
    )
    return await server.start("127.0.0.1", 0)


async def _served(port: int) -> bool:
    """A well-formed client gets its answer."""
    conn = await connect(f"127.0.0.1:{port}")
    try:
        resp = await conn.invoke(_request("ok"), timeout_ms=3000)
        return resp.code == ResponseCode.SUCCESS and resp.ext_fields["topic"] == "ok"
    finally:
        await conn.close()


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        async with asyncio.timeout(3):
            return await reader.read(1) == b""
    except ConnectionResetError:
        return True


def _partial_frame(total: int, sent: int) -> bytes:
    """The first ``sent`` bytes of a ``total``-byte frame (never whole)."""
    assert sent < total
    return (struct.pack(">ii", total - 4, 10) + b"x" * total)[:sent]


@async_test
async def test_idle_connection_closed_after_the_idle_timeout_but_not_while_busy() -> None:
    clock = FakeClock()
    server = await _server(clock, idle_timeout_ms=120_000)
    idle = await connect(f"127.0.0.1:{server.port}")
    busy = await connect(f"127.0.0.1:{server.port}")
    await busy.invoke_oneway(RemotingCommand.request(RequestCode.HEART_BEAT))  # hangs
    await _poll(lambda: any(c.busy for c in server.connections))
    clock.now += 119
    server.guard.sweep()
    assert not idle.closed.is_set()
    clock.now += 2
    server.guard.sweep()
    await _poll(idle.closed.is_set)
    assert not busy.closed.is_set() and len(server.connections) == 1
    await busy.close()
    await server.stop()


@async_test
async def test_slowloris_a_byte_at_a_time_is_dropped_at_the_frame_deadline() -> None:
    clock = FakeClock()
    server = await _server(clock, frame_read_timeout_ms=30_000)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    frame = _partial_frame(200, 150)
    sent = 0
    while server.connections:  # one byte a "second": never idle, never a whole frame
        writer.write(frame[sent : sent + 1])
        await writer.drain()
        sent += 1
        await _poll(lambda n=sent: sum(c.pending_bytes for c in server.connections) == n)
        clock.now += 1
        server.guard.sweep()
    assert sent == 31, "dropped once the frame had been in progress for over 30 s"
    assert await _closed_by_server(reader)
    assert server.guard.pending_bytes == 0 and not server.connections
    assert await _served(server.port)
    writer.close()
    await server.stop()


@async_test
async def test_a_steady_stream_of_whole_frames_never_trips_the_frame_deadline() -> None:
    clock = FakeClock()
    server = await _server(clock, frame_read_timeout_ms=1000)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    frames = b"".join(encode_frame(_request(str(i))) for i in range(60))
    cut = len(frames) // 60 + 7  # every write ends inside a frame
    for start in range(0, len(frames), cut):
        writer.write(frames[start : start + cut])
        await writer.drain()
        clock.now += 0.5
        await asyncio.sleep(0)
        server.guard.sweep()
    got = b""
    async with asyncio.timeout(5):
        while got.count(b'"topic"') < 60:
            chunk = await reader.read(65536)
            assert chunk, "closed"
            got += chunk
    assert len(server.connections) == 1
    writer.close()
    await server.stop()


def test_connection_cap_refuses_the_next_one_and_serves_again_after_a_close(caplog) -> None:
    async def main() -> None:
        server = await _server(FakeClock(), max_connections=5)
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(5)]
        await _poll(lambda: len(server.connections) == 5)
        extra = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(20)]
        for reader, _ in extra:
            assert await _closed_by_server(reader)
        assert len(server.connections) == 5 and server.guard.refusals.total == 20
        held.pop()[1].close()
        await _poll(lambda: len(server.connections) == 4)
        assert await _served(server.port)
        for _, w in held + extra:
            w.close()
        await server.stop()

    with caplog.at_level(logging.WARNING, logger="broker.remoting.limits"):
        asyncio.run(main())
    refusals = [r for r in caplog.records if "refused connection" in r.getMessage()]
    assert len(refusals) == 1, "twenty refusals from one host are logged once"
    assert "127.0.0.1:" in refusals[0].getMessage()


@async_test
async def test_partial_frame_budget_drops_the_oldest_hogs_and_keeps_serving() -> None:
    clock = FakeClock()
    budget = 512 * 1024
    server = await _server(clock, max_pending_bytes=budget)
    hogs = []
    for i in range(6):  # each holds 200 KiB of a 1 MiB frame
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_partial_frame(1 << 20, 200 * 1024))
        await writer.drain()
        hogs.append((reader, writer))
        clock.now += 1
        await _poll(lambda i=i: server.guard.pending_bytes >= min(i + 1, 2) * 200 * 1024)
        assert server.guard.pending_bytes <= budget
    # the oldest four went, the newest two still hold theirs
    for reader, _ in hogs[:4]:
        assert await _closed_by_server(reader)
    assert len(server.connections) == 2
    assert server.guard.pending_bytes == 2 * 200 * 1024
    assert await _served(server.port)
    for _, w in hogs:
        w.close()
    await server.stop()


@async_test
async def test_a_malformed_frame_closes_only_its_connection() -> None:
    server = await _server(FakeClock())
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    header = b'{"code":1e999}'
    writer.write(struct.pack(">ii", 4 + len(header), len(header)) + header)
    await writer.drain()
    assert await _closed_by_server(reader)
    assert await _served(server.port)
    writer.close()
    await server.stop()


def test_refusal_log_is_rate_limited_per_host_and_bounded(caplog) -> None:
    clock = FakeClock()
    refusals = RefusalLog(clock, interval_s=60, max_keys=3)
    with caplog.at_level(logging.WARNING, logger="broker.remoting.limits"):
        for port in range(100):
            refusals.refuse("dropped", f"10.0.0.1:{port}", "why")
        clock.now += 61
        refusals.refuse("dropped", "10.0.0.1:1", "why")
        for host in range(10):
            refusals.refuse("dropped", f"10.0.1.{host}:1", "why")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 + 1 + 10
    assert "99 more from 10.0.0.1 not logged" in messages[1]
    assert len(refusals._seen) <= 3 and refusals.total == 111


def test_limits_validate() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        ServerLimits(max_connections=0)
    assert ServerLimits(idle_timeout_ms=200, frame_read_timeout_ms=100).sweep_interval_ms == 25
    assert ServerLimits().sweep_interval_ms == 1000


def test_exposure_warning_only_beyond_loopback_with_acl_off(caplog) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("") and not is_loopback("10.1.2.3")
    with caplog.at_level(logging.WARNING):
        assert not warn_if_exposed("the broker", "127.0.0.1", acl_enable=False)
        assert not warn_if_exposed("the broker", "0.0.0.0", acl_enable=True)
        assert warn_if_exposed("the broker", "0.0.0.0", acl_enable=False)
    assert len(caplog.records) == 1 and "ACL OFF" in caplog.records[0].getMessage()


@async_test
async def test_a_peer_that_never_reads_its_responses_is_dropped() -> None:
    async def big(conn, req):
        return req.make_response(ResponseCode.SUCCESS, body=bytes(256 * 1024))

    server = RemotingServer(
        {RequestCode.GET_ROUTEINFO_BY_TOPIC: big}, ServerLimits(max_unread_bytes=2 << 20)
    )
    await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    # 400 requests in one write, never reading: 100 MiB of answers without the limit
    writer.write(b"".join(encode_frame(_request(str(i))) for i in range(400)))
    await writer.drain()
    await _poll(lambda: server.guard.refusals.total == 1 and not server.connections)
    writer.close()
    # a well-formed client is still served (big answers, read as they come)
    conn = await connect(f"127.0.0.1:{server.port}")
    for _ in range(20):
        resp = await conn.invoke(_request(), timeout_ms=3000)
        assert len(resp.body) == 256 * 1024
    await conn.close()
    await server.stop()
