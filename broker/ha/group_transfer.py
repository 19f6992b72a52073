"""SYNC_MASTER puts waiting for their slaves (RocketMQ's GroupTransferService): a put waits
until the best slave acknowledgement passes its end offset, or until its deadline on the
service's clock passes (FLUSH_SLAVE_TIMEOUT). One expiry task sleeps on the clock until the
oldest deadline, so a test or the simulation moves put timeouts by ticks."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import deque

from broker.clock import SYSTEM_CLOCK, Clock, sleep_unless_set
from broker.store.results import PutMessageStatus

log = logging.getLogger(__name__)


class GroupTransferService:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._waiters: list[tuple[int, int, asyncio.Future]] = []  # heap of (end, seq, future)
        # (deadline ms, end, future) in the order the puts came: one timeout for all, so the
        # oldest deadline is always at the left
        self._deadlines: deque[tuple[float, int, asyncio.Future]] = deque()
        self._seq = itertools.count()
        self._woken = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._expire(), name="ha-transfer")

    async def stop(self) -> None:
        """Every put still waiting gets FLUSH_SLAVE_TIMEOUT."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for _end, _seq, fut in self._waiters:
            if not fut.done():
                fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self._waiters.clear()
        self._deadlines.clear()

    def on_ack(self, best_ack: int) -> None:
        """The best acknowledgement over all slaves is now ``best_ack``."""
        while self._waiters and self._waiters[0][0] <= best_ack:
            _end, _seq, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(PutMessageStatus.PUT_OK)
        deadlines = self._deadlines
        while deadlines and deadlines[0][2].done():
            deadlines.popleft()

    async def wait(self, end: int, timeout_ms: float) -> PutMessageStatus:
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (end, next(self._seq), fut))
        if not self._deadlines:
            self._woken.set()  # the expiry task sleeps without a deadline: give it this one
        self._deadlines.append((self.clock.monotonic_ms() + timeout_ms, end, fut))
        status = await asyncio.shield(fut)
        if status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and self._task is not None:
            log.warning("HA: no slave acknowledged offset %d within %d ms", end, timeout_ms)
        return status

    async def _expire(self) -> None:
        deadlines = self._deadlines
        while True:
            now = self.clock.monotonic_ms()
            while deadlines and (deadlines[0][2].done() or deadlines[0][0] <= now):
                _deadline, _end, fut = deadlines.popleft()
                if not fut.done():
                    fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            self._woken.clear()
            if deadlines:
                await sleep_unless_set(self.clock, self._woken, deadlines[0][0] - now)
            else:
                await self._woken.wait()
