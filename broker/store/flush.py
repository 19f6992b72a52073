"""Flushing the commit log: group commit (SYNC_FLUSH) and the periodic flusher (ASYNC_FLUSH).

Both answer through the store's put futures:

- :class:`GroupCommitService` — appenders register ``(end offset, future)``; the service thread
  takes every waiting request at once, does one flush for all of them, and completes each future
  whose end the flushed offset passed. Requests still waiting after ``sync_flush_timeout_ms``
  complete with FLUSH_DISK_TIMEOUT (an expiry thread does this even while a flush hangs).
- :class:`FlushRealTimeService` — every ``flush_interval_commit_log_ms`` flushes when at least
  ``flush_commit_log_least_pages`` pages are dirty, and everything every
  ``flush_commit_log_thorough_interval_ms``. Its decision step :meth:`tick` takes the time as an
  argument so tests drive it without sleeping.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

from broker.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)


class GroupCommitService:
    """Group commit (RocketMQ's GroupCommitService); its timed waits (the expiry of waiting
    requests, the back-off from a failing disk) are on ``clock``, so a driven clock moves them
    by ticks; waiting for work is untimed (a notify)."""

    def __init__(
        self,
        flush: Callable[[], int],
        on_flushed: Callable[[list[tuple[Any, bool]]], None],
        sync_flush_timeout_ms: int,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self._flush = flush
        # on_flushed([(waiter, flushed_ok), ...]) completes a whole batch of waiters at once;
        # a waiter is anything with done() (the store wraps its put futures)
        self._on_flushed = on_flushed
        self._timeout_ms = sync_flush_timeout_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the flush thread waits for requests
        self._expiry = threading.Event()  # wakes the expiry thread: a first deadline, or stop
        self._stopping = threading.Event()
        self._requests: list[tuple[int, Any]] = []
        # (deadline ms, [(end, waiter), ...]) per submitted batch; one timeout for all, so
        # deadlines come in order and the oldest batch is always at the left
        self._deadlines: collections.deque[tuple[int, list[tuple[int, Any]]]] = collections.deque()
        self._stopped = False
        self._threads: list[threading.Thread] = []
        self.fsyncs = 0

    def start(self) -> None:
        for target, name in ((self._run, "group-commit"), (self._expire, "group-commit-expiry")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def submit(self, end_offset: int, future: Any) -> None:
        self.submit_many([(end_offset, future)])

    def submit_many(self, batch: list[tuple[int, Any]]) -> None:
        """Request flushes up to each ``end`` offset, in append order: one wake-up for all."""
        with self._lock:
            if self._stopped:
                self._on_flushed([(waiter, False) for _, waiter in batch])
                return
            self._requests.extend(batch)
            if not self._deadlines:
                self._expiry.set()
            self._deadlines.append((self._now_ms() + self._timeout_ms, batch))
            self._work.notify()

    def _now_ms(self) -> int:
        return int(self._clock.monotonic_ms())

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._requests and not self._stopped:
                    self._work.wait()
                if self._stopped and not self._requests:
                    return
                stopping = self._stopped
                batch = self._requests
                self._requests = []
                # forget deadlines of batches already answered (completions go in offset order)
                deadlines = self._deadlines
                while deadlines and deadlines[0][1][-1][1].done():
                    deadlines.popleft()
            try:
                flushed = self._flush()
                self.fsyncs += 1
            except Exception:  # a failing disk: the waiting appends time out, never lie
                log.exception("group commit flush failed")
                flushed = -1
            waiting = []
            done = []
            for item in batch:
                waiter = item[1]
                if waiter.done():
                    continue
                if item[0] <= flushed:
                    done.append((waiter, True))
                else:  # appended after the flush started (or the flush failed): next round
                    waiting.append(item)
            if done:
                self._on_flushed(done)
            if stopping:
                self._on_flushed([(waiter, False) for _, waiter in waiting])
                return
            if waiting:
                with self._lock:
                    self._requests[:0] = waiting
                if flushed < 0:  # back off from a failing disk
                    self._clock.wait_event_ms(self._stopping, 10)

    def _expire(self) -> None:
        while True:
            self._expiry.clear()  # a set from here on ends the wait below
            with self._lock:
                if self._stopped:
                    return
                now = self._now_ms()
                deadlines = self._deadlines
                expired = []
                while deadlines and deadlines[0][0] <= now:
                    _, batch = deadlines.popleft()
                    expired.extend((waiter, False) for _, waiter in batch if not waiter.done())
                if expired:
                    self._on_flushed(expired)
                wait_ms = deadlines[0][0] - now if deadlines else None
            if wait_ms is None:
                self._expiry.wait()
            else:
                self._clock.wait_event_ms(self._expiry, wait_ms)

    def shutdown(self) -> None:
        """Flush what is waiting, then stop both threads."""
        with self._lock:
            self._stopped = True
            self._work.notify_all()
        self._stopping.set()
        self._expiry.set()
        for t in self._threads:
            t.join(timeout=10)
        with self._lock:
            leftover, self._requests = self._requests, []
        if leftover:
            self._on_flushed([(waiter, False) for _, waiter in leftover])


class FlushRealTimeService:
    def __init__(
        self,
        flush: Callable[[int], int],
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        clock_ms: Callable[[], int] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ):
        """``clock`` paces the rounds (its thread wait); ``clock_ms`` is the time a round's
        decision reads (default: ``clock``'s monotonic ms)."""
        clock_ms = clock_ms or (lambda: int(clock.monotonic_ms()))
        self._clock = clock
        self._flush = flush  # flush(least_pages) -> flushed offset
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self._clock_ms = clock_ms
        self._last_thorough_ms = clock_ms()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fsyncs = 0

    def tick(self, now_ms: int) -> int:
        """One round of the flusher's decision at time ``now_ms``; returns the flushed offset."""
        least = self.least_pages
        if now_ms - self._last_thorough_ms >= self.thorough_interval_ms:
            self._last_thorough_ms = now_ms
            least = 0
        self.fsyncs += 1
        return self._flush(least)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="flush-commitlog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._clock.wait_event_ms(self._stop, self.interval_ms):
            try:
                self.tick(self._clock_ms())
            except Exception:
                log.exception("periodic commit log flush failed")

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._flush(0)


class FlushConsumeQueueService:
    """Every ``interval_ms`` of ``clock``, ``flush()`` the consume queues and the checkpoint
    (RocketMQ's FlushConsumeQueueService) on a thread of its own; a failing round is logged and
    the next one comes. ``stop()`` ends the thread (it may be mid-round: ``join`` waits)."""

    def __init__(self, flush: Callable[[], None], interval_ms: int, clock: Clock = SYSTEM_CLOCK):
        self._flush = flush
        self.interval_ms = interval_ms
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="flush-cq", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._clock.wait_event_ms(self._stop, self.interval_ms):
            try:
                self._flush()
            except Exception:
                log.exception("consume queue flush failed")

    def stop(self, join: bool = True) -> None:
        self._stop.set()
        if join and self._thread is not None:
            self._thread.join(timeout=10)
