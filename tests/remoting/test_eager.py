"""Eager handlers (started inside the read loop) and coalesced writes."""

import asyncio

from broker.remoting.client import RemotingClient
from broker.remoting.codes import ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import Eager
from broker.remoting.server import RemotingServer


def run(processors, body):
    async def main():
        server = await RemotingServer(processors).start("127.0.0.1", 0)
        client = RemotingClient()
        try:
            await body(client, f"127.0.0.1:{server.port}", server)
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_eager_handlers_answer_pipelined_requests_in_order_of_arrival():
    seen = []

    async def echo(conn, req):
        seen.append(int(req.field("n")))
        return req.make_response(ResponseCode.SUCCESS, ext_fields={"n": req.field("n")})

    async def body(client, addr, server):
        reqs = [RemotingCommand.request(900, {"n": i}) for i in range(500)]
        resps = await asyncio.gather(*(client.invoke(addr, r) for r in reqs))
        assert [int(r.field("n")) for r in resps] == list(range(500))
        assert seen == list(range(500))

    run({900: Eager(echo)}, body)


def test_eager_handler_that_waits_with_a_timeout_does_not_cancel_the_connection():
    async def slow(conn, req):
        await asyncio.sleep(0)  # leaves the read loop for a task of its own
        try:
            async with asyncio.timeout(0.05):
                await asyncio.Event().wait()
        except TimeoutError:
            return req.make_response(ResponseCode.SYSTEM_BUSY, remark="timed out")

    async def broken(conn, req):
        raise ValueError("bug in a handler")

    async def body(client, addr, server):
        r = await client.invoke(addr, RemotingCommand.request(901))
        assert r.code == ResponseCode.SYSTEM_BUSY
        r = await client.invoke(addr, RemotingCommand.request(902))
        assert r.code == ResponseCode.SYSTEM_ERROR and "bug in a handler" in r.remark
        # the same connection still serves
        r = await client.invoke(addr, RemotingCommand.request(901))
        assert r.code == ResponseCode.SYSTEM_BUSY
        assert len(server.connections) == 1

    run({901: Eager(slow), 902: Eager(broken)}, body)
