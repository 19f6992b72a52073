"""The loop a node runs on (eventLoop): uvloop by default, the standard one on request; both
serve the same protocol, and runtime info says which one is serving."""

import asyncio
import json

import pytest

from broker import aio
from broker.client.routes import MessageQueue
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand


def test_run_picks_the_loop() -> None:
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert aio.run(loop_module()).startswith("uvloop")
    assert aio.run(loop_module(), "asyncio").startswith("asyncio")
    with pytest.raises(ValueError):
        aio.run(loop_module(), "trio")


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_broker_process_serves_on_either_loop(start_broker, event_loop) -> None:
    from broker.client.producer import Producer, SendStatus

    broker = start_broker(eventLoop=event_loop)

    async def main() -> dict:
        client = RemotingClient()
        producer = Producer("PG", [])
        try:
            # straight to the broker: the route is not what this test is about
            sent = await producer._send_once(
                broker.addr, MessageQueue("LoopTopic", "broker-a", 0), b"x", {"UNIQ_KEY": "K"}, 0
            )
            assert sent.status is SendStatus.SEND_OK
            r = await client.invoke(
                broker.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
            )
            assert r.code == ResponseCode.SUCCESS
            return json.loads(r.body)["table"]
        finally:
            await producer.close()
            await client.close()

    table = asyncio.run(main())
    assert table["eventLoop"] == event_loop
    assert table["msgPutTotalTodayNow"] == "1"
    assert broker.terminate() == 0
