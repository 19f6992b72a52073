import asyncio
import functools
import os
import struct

import pytest

from broker.remoting.client import RemotingClient, connect
from broker.remoting.codec import FrameReader, encode_frame
from broker.remoting.codes import RequestCode, ResponseCode, SerializeType
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import ConnectionClosedError, RemotingTimeoutError
from broker.remoting.server import RemotingServer
from tests.support.aio import async_test
from tests.support.waiting import wait_for

_poll = functools.partial(wait_for, timeout_ms=5_000)  # tests/support/waiting.py


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _echo(conn, req):
    return req.make_response(ResponseCode.SUCCESS, ext_fields={"topic": req.field("topic")})


async def _hang(conn, req):
    await asyncio.Event().wait()


def _server():
    return RemotingServer(
        {RequestCode.GET_ROUTEINFO_BY_TOPIC: _echo, RequestCode.HEART_BEAT: _hang}
    )


async def _raw_roundtrip(port, frame: bytes):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(frame)
    await writer.drain()
    frames = FrameReader("server")
    try:
        while True:
            data = await asyncio.wait_for(reader.read(4096), 5)
            assert data, "server closed without answering"
            got = frames.feed(data)
            if got:
                return got[0]
    finally:
        writer.close()


@async_test
async def test_answers_json_and_binary_in_the_same_serialize_type():
    server = await _server().start()
    for stype in (SerializeType.JSON, SerializeType.ROCKETMQ):
        req = RemotingCommand.request(105, {"topic": "T1"})
        req.serialize_type = stype
        resp = await _raw_roundtrip(server.port, encode_frame(req))
        assert resp.serialize_type == stype and resp.is_response
        assert resp.code == 0 and resp.opaque == req.opaque and resp.ext_fields["topic"] == "T1"
    await server.stop()


@async_test
async def test_unknown_code_and_missing_field_are_error_responses():
    server = await _server().start()
    client = RemotingClient()
    addr = f"127.0.0.1:{server.port}"
    resp = await client.invoke(addr, RemotingCommand.request(9999))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "9999" in resp.remark
    resp = await client.invoke(addr, RemotingCommand.request(105))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "'topic'" in resp.remark
    await client.close()
    await server.stop()


@pytest.mark.parametrize(
    "bad",
    [
        b"GET / HTTP/1.1\r\n\r\n",
        struct.pack(">ii", 32 * 1024 * 1024, 0),
        struct.pack(">ii", 7, 3) + b"{x}",
        struct.pack(">ii", 100, 2) + b"{}",  # half frame, then the client vanishes
    ],
)
@async_test
async def test_bad_input_closes_only_that_connection_without_leaks(bad):
    server = await _server().start()
    good = await connect(f"127.0.0.1:{server.port}")
    assert (await good.invoke(RemotingCommand.request(105, {"topic": "a"}))).code == 0
    fds_before, tasks_before = _fds(), len(asyncio.all_tasks())
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(bad)
    await writer.drain()
    if bad.startswith(struct.pack(">i", 100)):
        writer.close()
    else:
        assert await asyncio.wait_for(reader.read(), 5) == b""  # server closed it
        writer.close()
    await writer.wait_closed()
    await _poll(lambda: len(server.connections) == 1)
    await _poll(lambda: _fds() == fds_before and len(asyncio.all_tasks()) == tasks_before)
    assert (await good.invoke(RemotingCommand.request(105, {"topic": "b"}))).code == 0
    await good.close()
    await server.stop()


@async_test
async def test_client_vanishing_mid_request_leaves_no_task():
    server = await _server().start()
    await asyncio.sleep(0)  # the server's sweeper reaches its first wait
    tasks_before, fds_before = len(asyncio.all_tasks()), _fds()
    conn = await connect(f"127.0.0.1:{server.port}")
    await conn.invoke_oneway(RemotingCommand.request(34))
    await _poll(lambda: any(c._tasks for c in server.connections))
    await conn.close()
    await _poll(lambda: not server.connections)
    await _poll(lambda: len(asyncio.all_tasks()) == tasks_before and _fds() == fds_before)
    await server.stop()


@async_test
async def test_timeout_and_close_fail_pending_requests_with_cause():
    server = await _server().start()
    conn = await connect(f"127.0.0.1:{server.port}")
    with pytest.raises(RemotingTimeoutError, match="within 50 ms"):
        await conn.invoke(RemotingCommand.request(34), timeout_ms=50)
    pending = asyncio.ensure_future(conn.invoke(RemotingCommand.request(34), 10_000))
    await _poll(lambda: bool(conn._pending))
    await server.stop()  # server goes away: the pending request fails, not hangs
    with pytest.raises(ConnectionClosedError):
        await pending
    with pytest.raises(ConnectionClosedError):
        await conn.invoke(RemotingCommand.request(105, {"topic": "x"}))


@async_test
async def test_server_to_client_oneway_notify():
    got = asyncio.Queue()

    async def on_notify(conn, req):
        await got.put(req.ext_fields["consumerGroup"])
        return None

    server = await _server().start()
    conn = await connect(
        f"127.0.0.1:{server.port}", {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}
    )
    await conn.invoke(RemotingCommand.request(105, {"topic": "x"}))
    (server_side,) = server.connections
    await server_side.invoke_oneway(
        RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"})
    )
    assert await asyncio.wait_for(got.get(), 5) == "G"
    await conn.close()
    await server.stop()
