"""Time for every part of a node, injected: the one place that reads clocks or sleeps.

A part that needs the time or a pause takes a ``Clock`` when it is built and never calls
``time.time``, ``time.monotonic`` or ``asyncio.sleep`` itself, so a test (and the deterministic
simulation) can drive it by ticks with no wall time:

- ``SystemClock`` (``SYSTEM_CLOCK``): the process's clocks and ``asyncio.sleep``; what a node runs on.
- ``DrivenClock``: time moves only when ``await clock.advance(ms)`` is called; sleepers wake in
  deadline order (ties in the order they slept), each wake-up followed by a turn of the event loop
  so the woken coroutine runs before time moves on. Wall time can also jump (``jump_wall``),
  within bounds a test chooses, as NTP steps do; monotonic time never goes back.

Units are in the names: ``*_ms`` are milliseconds.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch: for timestamps written to files, events, headers."""

    def monotonic_ms(self) -> float:
        """Milliseconds on a clock that never goes back: for intervals, leases, deadlines."""

    async def sleep_ms(self, ms: float) -> None:
        """Pause this coroutine for ``ms`` milliseconds of this clock's time (<= 0: one turn)."""


class SystemClock:
    """The process's clocks; ``sleep_ms`` is ``asyncio.sleep``."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return time.monotonic_ns() / 1_000_000

    async def sleep_ms(self, ms: float) -> None:
        await asyncio.sleep(max(0.0, ms) / 1000)


SYSTEM_CLOCK = SystemClock()

# turns of the event loop given to woken coroutines before time moves on: enough for a woken
# coroutine to run its round and reach its next sleep through a few awaits of ready futures
_SETTLE_TURNS = 8


class DrivenClock:
    """A clock that moves only when driven: ``await clock.advance(ms)`` or ``await clock.run_until``.

    Everything that sleeps on it must run on the event loop that drives it."""

    def __init__(self, *, wall_start_ms: int = 1_700_000_000_000, monotonic_start_ms: float = 0.0):
        self._mono_ms = float(monotonic_start_ms)
        self._wall_offset_ms = wall_start_ms - monotonic_start_ms
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def wall_ms(self) -> int:
        return int(self._mono_ms + self._wall_offset_ms)

    def monotonic_ms(self) -> float:
        return self._mono_ms

    async def sleep_ms(self, ms: float) -> None:
        if ms <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono_ms + ms, next(self._seq), fut))
        await fut

    def jump_wall(self, delta_ms: int) -> None:
        """Step the wall clock by ``delta_ms`` (either way); monotonic time is unaffected."""
        self._wall_offset_ms += delta_ms

    @property
    def next_deadline_ms(self) -> float | None:
        """The earliest pending sleeper's wake-up time, or None when nothing sleeps."""
        self._drop_cancelled()
        return self._sleepers[0][0] if self._sleepers else None

    @property
    def sleeping(self) -> int:
        self._drop_cancelled()
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    async def settle(self) -> None:
        """Give ready coroutines a few turns of the loop without moving time."""
        for _ in range(_SETTLE_TURNS):
            await asyncio.sleep(0)

    async def advance(self, ms: float) -> None:
        """Move time forward by ``ms``, waking every sleeper whose deadline is passed, in order."""
        if ms < 0:
            raise ValueError(f"a driven clock cannot go back ({ms} ms)")
        await self.run_until(self._mono_ms + ms)

    async def run_until(self, target_ms: float) -> None:
        await self.settle()
        while True:
            deadline = self.next_deadline_ms
            if deadline is None or deadline > target_ms:
                break
            self._mono_ms = max(self._mono_ms, deadline)
            while self._sleepers and self._sleepers[0][0] <= self._mono_ms:
                _, _, fut = heapq.heappop(self._sleepers)
                if not fut.done():
                    fut.set_result(None)
            await self.settle()
        self._mono_ms = max(self._mono_ms, target_ms)
        await self.settle()

    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
