"""The controller client's role switch in flight: one at a time, bounded in time, and
preempted by a newer master epoch.

A switch (become master, or become a slave: reconcile against the master, cut the log, follow
it) runs as a task of its own, so the client's rounds (heartbeats, replica-info pulls, 1008
hints) go on while it runs. Two rules keep a switch toward a master that hangs from holding the
node for longer than a failover:

- **preempted**: when the controller names a newer master epoch, the switch in flight is
  cancelled and awaited (it unwinds and forgets its role: ``on_failed``) before the newer one
  starts. Cancellation lands only at an ``await``: the rejoin cut (``broker/ha/rejoin_cut.py``)
  has none, so it is either done whole or not begun, and a reconcile cancelled while it waits
  for an old master's epochs never cuts against them (never truncate toward a master that is no
  longer the current one);
- **bounded**: a switch toward another node (``bounded=True``: a slave's, which asks its master)
  ends with ``SwitchTimeoutError`` after ``timeout_ms`` of the clock, and the client applies
  the controller's view again at its next pull. The bound is a last resort (30 s by default,
  for a master that hangs while the controller still names it): its requests have their own
  timeouts (5 s), and a bound near a loaded machine's slow but sound switch (a rejoin's cut
  and restart) would cancel and redo it again and again. A switch to master asks no peer and is never cut
  short, not even by a newer epoch (its half-started services would take writes unreplicated):
  the newer switch waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker.clock import Clock
from contracts.errors import HaproofError

log = logging.getLogger(__name__)


class SwitchTimeoutError(HaproofError):
    """A role switch did not end within its bound."""


class RoleSwitch:
    """The one switch in flight of a controller client. ``target_epoch``: the master epoch the
    switch in flight goes to (None: none in flight)."""

    def __init__(self, clock: Clock, timeout_ms: float) -> None:
        self.clock, self.timeout_ms = clock, timeout_ms
        self.target_epoch: int | None = None
        self.preempted = 0  # switches cancelled by a newer one
        self.timed_out = 0  # switches ended by their bound
        self._task: asyncio.Task[None] | None = None
        self._preemptible = False

    @property
    def in_flight(self) -> bool:
        return self._task is not None and not self._task.done()

    async def cancel(self) -> None:
        """Cancel a slave's switch in flight, if any, and wait until it has unwound; a switch
        to master (no peer to wait on) is let finish instead."""
        task, self._task, self.target_epoch = self._task, None, None
        if task is not None and not task.done():
            if self._preemptible:
                self.preempted += 1
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def begin(
        self,
        epoch: int,
        run: Callable[[], Awaitable[None]],
        on_failed: Callable[[BaseException], None],
        *,
        bounded: bool,
    ) -> None:
        """Start the switch to ``epoch`` (the caller cancelled the one before it);
        ``on_failed`` is called when it fails, times out or is cancelled."""
        self.target_epoch, self._preemptible = epoch, bounded
        self._task = asyncio.create_task(self._run(epoch, run, on_failed, bounded))

    async def settled(self) -> None:
        """Wait until no switch is in flight (tests, and a client that stops)."""
        while self._task is not None and not self._task.done():
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, epoch, run, on_failed, bounded: bool) -> None:
        try:
            if bounded:
                await self._within_bound(epoch, run())
            else:
                await run()
        except asyncio.CancelledError as exc:
            log.warning("role switch to master epoch %d preempted by a newer one", epoch)
            on_failed(exc)
            raise
        except Exception as exc:  # noqa: BLE001 - logged with its cause; the next pull retries
            log.warning("role switch to master epoch %d failed: %s", epoch, exc, exc_info=exc)
            on_failed(exc)
        finally:
            if self._task is asyncio.current_task():
                self.target_epoch = None

    async def _within_bound(self, epoch: int, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        timer = asyncio.ensure_future(self.clock.sleep_ms(self.timeout_ms))
        try:
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            self.timed_out += 1
            raise SwitchTimeoutError(
                f"role switch to master epoch {epoch} took more than {self.timeout_ms:.0f} ms "
                "(a master that does not answer?): applied again at the next pull"
            )
        task.result()
