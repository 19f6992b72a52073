"""The commit load of ``haproof bench broker --commit-groups N``: N consumer groups each commit
every queue of a ``--commit-queues``-queue topic once per interval (as RocketMQ clients'
persistConsumerOffset does every 5 s, here every second), each commit one above the last, while
the producers send; with ``offsetCommitThroughLog`` on every round is records in the log."""

from __future__ import annotations

import asyncio
import time
import uuid

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tools.bench.broker_load import pct

PER_QUEUE = 200  # messages per queue: commits rise by one a round, for up to 200 rounds


class CommitLoad:
    def __init__(self, master: str, groups: int, queues: int, interval_ms: float = 1000) -> None:
        self.master, self.groups, self.queues = master, groups, queues
        self.interval_s = interval_ms / 1000
        self.topic = f"BenchCommits-{uuid.uuid4().hex[:6]}"
        self.latencies: list[float] = []
        self.failed = 0
        self.rounds = 0

    async def prepare(self, namesrv: str) -> None:
        """The topic, and ``PER_QUEUE`` messages in each of its queues (one batch per queue)."""
        from broker.client.producer import Producer

        client = RemotingClient()
        try:
            fields = {
                "topic": self.topic,
                "readQueueNums": self.queues,
                "writeQueueNums": self.queues,
                "perm": 6,
            }
            req = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
            resp = await client.invoke(self.master, req, 10_000)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        finally:
            await client.close()
        producer = Producer("bench-commit-fill", [namesrv])
        try:
            for _ in range(self.queues):
                await producer.send_batch(self.topic, [(b"c" * 16, None)] * PER_QUEUE)
        finally:
            await producer.close()

    async def run(self, stop: asyncio.Event) -> None:
        client = RemotingClient()
        try:
            while not stop.is_set() and self.rounds < PER_QUEUE:
                started = time.perf_counter()
                self.rounds += 1
                await asyncio.gather(
                    *(
                        self._commit(client, g, q)
                        for g in range(self.groups)
                        for q in range(self.queues)
                    )
                )
                left = self.interval_s - (time.perf_counter() - started)
                try:
                    await asyncio.wait_for(stop.wait(), max(left, 0))
                except TimeoutError:
                    pass
        finally:
            await client.close()

    async def _commit(self, client: RemotingClient, group: int, queue: int) -> None:
        fields = {
            "consumerGroup": f"bench-commit-{group}",
            "topic": self.topic,
            "queueId": queue,
            "commitOffset": self.rounds,
        }
        t0 = time.perf_counter()
        try:
            req = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, fields)
            resp = await client.invoke(self.master, req, 10_000)
            ok = resp.code == ResponseCode.SUCCESS
        except Exception:  # noqa: BLE001 - counted: a bench reports failures, never dies of one
            ok = False
        self.failed += not ok
        self.latencies.append(time.perf_counter() - t0)

    def figures(self) -> dict:
        return {
            "commit_groups": self.groups,
            "commit_queues": self.queues,
            "commit_rounds": self.rounds,
            "commits": len(self.latencies),
            "commits_failed": self.failed,
            "p50_commit_ms": round(pct(self.latencies, 0.5) * 1e3, 3),
            "p99_commit_ms": round(pct(self.latencies, 0.99) * 1e3, 3),
        }
