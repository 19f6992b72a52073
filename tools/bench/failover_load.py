"""The producer load of ``haproof bench failover`` and the final count of lost messages.

``senders`` asyncio loops share one ``Producer``: each sends one message at a time and waits for
its answer. A send that fails (connection closed, refused, no master in the route, a status
other than SEND_OK) is a refusal: the sender refreshes the topic's route from the name server
and tries again after ``backoff_ms`` (RocketMQ's client retries another broker and refreshes
routes every ``pollNameServerInterval``; a group of one broker set has no other broker, so the
route refresh is what finds the new master). Every SEND_OK is kept with its queue, queue
offset and body; ``lost`` pulls each of them back from the final master."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass

from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import HaproofError
from contracts.record.reader import scan_records


@dataclass(frozen=True)
class Ack:
    started: float  # monotonic s when the send began
    done: float  # ... when SEND_OK arrived
    queue_id: int
    queue_offset: int
    body: bytes


@dataclass(frozen=True)
class Refusal:
    started: float
    done: float
    reason: str


class Load:
    def __init__(
        self, namesrv: str, topic: str, senders: int, body_bytes: int, backoff_ms: int
    ) -> None:
        self.topic, self.senders, self.body_bytes = topic, senders, body_bytes
        self.backoff_s = backoff_ms / 1000
        self.producer = Producer("bench-failover", [namesrv], send_timeout_ms=1000, retry_times=0)
        self.acks: list[Ack] = []
        self.refusals: list[Refusal] = []
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._sender(i)) for i in range(self.senders)]

    async def stop(self) -> None:
        self.stopping.set()
        await asyncio.gather(*self._tasks)
        await self.producer.close()

    async def _sender(self, no: int) -> None:
        seq = 0
        while not self.stopping.is_set():
            seq += 1
            head = f"s{no}-{seq}-".encode()
            body = (head * (self.body_bytes // len(head) + 1))[: max(self.body_bytes, len(head))]
            started = time.monotonic()
            try:
                res = await self.producer.send(self.topic, body, keys=f"s{no}-{seq}")
            except HaproofError as exc:
                self._refused(started, type(exc).__name__ + ": " + str(exc))
                await self._refresh_route_later()
                continue
            if res.status is SendStatus.SEND_OK:
                self.acks.append(
                    Ack(started, time.monotonic(), res.queue.queue_id, res.queue_offset, body)
                )
            else:
                self._refused(started, res.status.value)
                await self._refresh_route_later()

    def _refused(self, started: float, reason: str) -> None:
        self.refusals.append(Refusal(started, time.monotonic(), reason[:160]))

    async def _refresh_route_later(self) -> None:
        """After a refusal: wait ``backoff_ms`` and ask the name server for the route again."""
        await asyncio.sleep(self.backoff_s)
        try:
            await self.producer.route(self.topic, refresh=True)
        except HaproofError:
            pass  # no route yet: the next send says so and we come back here

    def first_ack_started_after(self, t: float) -> Ack | None:
        """The earliest SEND_OK of a send begun at ``t`` or later (acks are kept in the order
        they arrived, and a send ends after it began: only the tail is read)."""
        first = None
        for a in reversed(self.acks):
            if a.done < t:
                break
            if a.started >= t and (first is None or a.done < first.done):
                first = a
        return first

    def last_ack_before(self, t: float) -> Ack | None:
        return next((a for a in reversed(self.acks) if a.done <= t), None)

    def refusals_between(self, t0: float, t1: float) -> list[Refusal]:
        return [r for r in self.refusals if t0 <= r.done <= t1]


def reasons(refusals: list[Refusal]) -> dict[str, int]:
    """Refusals counted by kind (the exception's first words or the send status)."""
    return dict(Counter(r.reason.split(":")[0] for r in refusals).most_common(8))


async def lost(acks: list[Ack], master: str, topic: str) -> list[Ack]:
    """The acknowledged messages that ``master`` does not hold byte for byte at their queue
    offset (pulled in batches, queue by queue)."""
    by_queue: dict[int, dict[int, Ack]] = {}
    for a in acks:
        by_queue.setdefault(a.queue_id, {})[a.queue_offset] = a
    client = RemotingClient()
    missing: list[Ack] = []
    try:
        for queue_id, want in sorted(by_queue.items()):
            have = await _pull_range(client, master, topic, queue_id, min(want), max(want))
            missing += [a for off, a in sorted(want.items()) if have.get(off) != a.body]
    finally:
        await client.close()
    return missing


async def _pull_range(
    client: RemotingClient, addr: str, topic: str, queue_id: int, first: int, last: int
) -> dict[int, bytes]:
    """Queue offset -> body for ``first..last`` of one queue (fewer when the queue ends)."""
    out: dict[int, bytes] = {}
    offset = first
    while offset <= last:
        req = RemotingCommand.request(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "bench-failover-check",
                "topic": topic,
                "queueId": queue_id,
                "queueOffset": offset,
                "maxMsgNums": 32,
                "sysFlag": 0,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
            },
        )
        resp = await client.invoke(addr, req, 10_000)
        if resp.code != ResponseCode.SUCCESS:
            break  # no more messages there: the rest counts as lost
        got = [r for r in scan_records(resp.body) if not r.is_blank]
        if not got:
            break
        for rec in got:
            out[rec.queue_offset] = bytes(rec.body)
        offset = got[-1].queue_offset + 1
    return out
