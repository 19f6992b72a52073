"""``haproof bench broker``: replication lag, from the master's slave acks (its ack history
when it keeps one, else polled HA status)."""

from __future__ import annotations

import asyncio
import json
import time

from contracts.errors import HaproofError


async def ha_ack(client, master: str) -> int:
    """The best slave ack offset in the master's HA status (-1: no slave)."""
    from broker.remoting.codes import RequestCode, ResponseCode
    from broker.remoting.command import RemotingCommand

    resp = await client.invoke(
        master, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS), 5000
    )
    if resp.code != ResponseCode.SUCCESS:
        raise HaproofError(f"bench broker: {master} refused GET_BROKER_HA_STATUS: {resp.remark}")
    slaves = json.loads(resp.body).get("slaves") or []
    return max((s["ackOffset"] for s in slaves), default=-1)


async def ack_history(master: str) -> list[tuple[float, int]]:
    """The master's record of when its best slave ack rose (empty if it keeps none)."""
    from broker.remoting.client import RemotingClient
    from broker.remoting.codes import RequestCode, ResponseCode
    from broker.remoting.command import RemotingCommand

    client = RemotingClient()
    try:
        req = RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS, {"ackHistory": "true"})
        resp = await client.invoke(master, req, 30_000)
    finally:
        await client.close()
    if resp.code != ResponseCode.SUCCESS:
        return []
    return [(float(t), int(o)) for t, o in json.loads(resp.body).get("ackHistory") or []]


async def wait_slave(master: str, timeout_s: float = 30.0) -> None:
    from broker.remoting.client import RemotingClient

    client = RemotingClient()
    deadline = time.monotonic() + timeout_s
    try:
        while await ha_ack(client, master) < 0:
            if time.monotonic() > deadline:
                raise HaproofError(f"bench broker: no slave connected to {master}")
            await asyncio.sleep(0.05)
    finally:
        await client.close()


class LagSampler:
    """Samples the master's best slave ack every ``interval_s``; a sent message's replication
    lag is the first sample covering its physical offset minus its send-ack time."""

    def __init__(self, master: str, interval_s: float = 0.01) -> None:
        self.master, self.interval_s = master, interval_s
        self.samples: list[tuple[float, int]] = []  # (perf_counter s, ack offset), ack rising
        self.acked: list[tuple[float, int]] = []  # (send-ack perf_counter s, phys offset)
        self.max_offset = -1  # the highest acked message's physical offset

    async def run(self, stop: asyncio.Event) -> None:
        from broker.remoting.client import RemotingClient

        client = RemotingClient()
        try:
            while True:
                ack = await ha_ack(client, self.master)
                self.samples.append((time.perf_counter(), ack))
                if stop.is_set() and ack > self.max_offset:
                    return
                await asyncio.sleep(self.interval_s)
        finally:
            await client.close()

    def lags_ms(self, history: list[tuple[float, int]] | None = None) -> list[float]:
        """Per acked message: when the first ack covering it landed on the master (its own ack
        history when it keeps one: monotonic clock, shared by every process here; else the
        polled samples) minus when its send was acknowledged."""
        import bisect

        points = history or self.samples
        acks = [a for _, a in points]
        lags = []
        for t_ack, off in self.acked:
            i = bisect.bisect_right(acks, off)  # first ack beyond the message's start
            if i < len(points):
                lags.append(max(0.0, points[i][0] - t_ack) * 1e3)
        return lags
