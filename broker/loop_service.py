"""One base for every background loop of a node (RocketMQ's ``ServiceThread``, on asyncio).

A service does one round of work in ``run_once`` and is run every ``period_ms`` of its clock, or
sooner when ``wakeup()`` is called (RocketMQ's ``wakeup``/``waitForRunning``). ``start()`` begins
the loop as a task of the running event loop; ``await stop()`` ends it: the current round
finishes, no new one starts, and the task is cancelled if it does not end within
``stop_timeout_ms``. A round that raises is logged with its cause and the loop goes on after
the period (a background loop must outlive one bad round); ``failures`` counts them and
``last_failure`` keeps the newest.

Time and sleeping come from the injected ``Clock``, so a test drives every loop of a node by
ticks (``DrivenClock.advance``) with no wall time.

    class Flusher(LoopService):
        async def run_once(self) -> None:
            self.log.flush()

    flusher = Flusher("flush", period_ms=500, clock=clock)
    flusher.start()
    ...
    await flusher.stop()
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod

from broker.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)


class LoopService(ABC):
    """Subclasses implement ``run_once``; ``period_ms`` may be changed between rounds."""

    def __init__(
        self,
        name: str,
        *,
        period_ms: float,
        clock: Clock = SYSTEM_CLOCK,
        run_first_round_at_once: bool = False,
        stop_timeout_ms: float = 5_000,
    ) -> None:
        self.name = name
        self.period_ms = period_ms
        self.clock = clock
        self.rounds = 0  # rounds finished, failed ones included
        self.failures = 0
        self.last_failure: BaseException | None = None
        self._first_at_once = run_first_round_at_once
        self._stop_timeout_ms = stop_timeout_ms
        self._woken = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    @abstractmethod
    async def run_once(self) -> None:
        """One round of the service's work."""

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError(f"service {self.name} was already started")
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=self.name)

    def wakeup(self) -> None:
        """Run the next round now instead of at the end of the period."""
        self._woken.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        self._woken.set()
        try:
            async with asyncio.timeout(self._stop_timeout_ms / 1000):
                await asyncio.shield(task)
        except TimeoutError:
            log.warning(
                "%s: did not stop within %d ms, cancelled", self.name, self._stop_timeout_ms
            )
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        except asyncio.CancelledError:
            task.cancel()
            raise

    async def _loop(self) -> None:
        if not self._first_at_once:
            await self._wait(self.period_ms)
        while not self._stopping:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a loop outlives a bad round, logged with its cause
                self.failures += 1
                self.last_failure = exc
                log.warning("%s: round failed: %s", self.name, exc, exc_info=exc)
            self.rounds += 1
            if self._stopping:
                break
            await self._wait(self.period_ms)

    async def _wait(self, ms: float) -> None:
        """Sleep ``ms`` on the clock, or less when woken or stopped."""
        if self._woken.is_set() or self._stopping:
            self._woken.clear()
            return
        sleeper = asyncio.ensure_future(self.clock.sleep_ms(ms))
        waker = asyncio.ensure_future(self._woken.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in (sleeper, waker):
                if not fut.done():
                    fut.cancel()
            await asyncio.gather(sleeper, waker, return_exceptions=True)
            self._woken.clear()
