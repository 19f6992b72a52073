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

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class GroupCommitService:
    def __init__(
        self,
        flush: Callable[[], int],
        on_flushed: Callable[[list[tuple[Any, bool]]], None],
        sync_flush_timeout_ms: int,
        clock_ms: Callable[[], int] = monotonic_ms,
    ):
        self._flush = flush
        # on_flushed([(waiter, flushed_ok), ...]) completes a whole batch of waiters at once;
        # a waiter is anything with done() (the store wraps its put futures)
        self._on_flushed = on_flushed
        self._timeout_ms = sync_flush_timeout_ms
        self._clock_ms = clock_ms
        self._cond = threading.Condition()
        self._requests: list[tuple[int, Any]] = []
        self._deadlines: list[tuple[int, int, Any]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._threads: list[threading.Thread] = []
        self.fsyncs = 0

    def start(self) -> None:
        for target, name in ((self._run, "group-commit"), (self._expire, "group-commit-expiry")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def submit(self, end_offset: int, future: Any) -> None:
        with self._cond:
            if self._stopped:
                self._on_flushed([(future, False)])
                return
            self._requests.append((end_offset, future))
            heapq.heappush(
                self._deadlines, (self._clock_ms() + self._timeout_ms, next(self._seq), future)
            )
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._requests and not self._stopped:
                    self._cond.wait()
                if self._stopped and not self._requests:
                    return
                stopping = self._stopped
                batch = [(end, fut) for end, fut in self._requests if not fut.done()]
                self._requests = []
            if not batch:
                continue
            try:
                flushed = self._flush()
                self.fsyncs += 1
            except Exception:  # a failing disk: the waiting appends time out, never lie
                log.exception("group commit flush failed")
                flushed = -1
            waiting = []
            done = []
            for end, fut in batch:
                if end <= flushed:
                    done.append((fut, True))
                else:  # appended after the flush started (or the flush failed): next round
                    waiting.append((end, fut))
            if done:
                self._on_flushed(done)
            if stopping:
                self._on_flushed([(fut, False) for _, fut in waiting])
                return
            if waiting:
                with self._cond:
                    self._requests.extend(waiting)
                    if flushed < 0:
                        self._cond.wait(0.01)  # back off from a failing disk

    def _expire(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = self._clock_ms()
                expired = []
                while self._deadlines and (
                    self._deadlines[0][2].done() or self._deadlines[0][0] <= now
                ):
                    _, _, fut = heapq.heappop(self._deadlines)
                    if not fut.done():
                        expired.append((fut, False))
                if expired:
                    self._on_flushed(expired)
                wait_s = (self._deadlines[0][0] - now) / 1000 if self._deadlines else None
                self._cond.wait(wait_s)

    def shutdown(self) -> None:
        """Flush what is waiting, then stop both threads."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=10)
        with self._cond:
            leftover, self._requests = self._requests, []
        if leftover:
            self._on_flushed([(fut, False) for _, fut in leftover])


class FlushRealTimeService:
    def __init__(
        self,
        flush: Callable[[int], int],
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        clock_ms: Callable[[], int] = monotonic_ms,
    ):
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
        while not self._stop.wait(self.interval_ms / 1000):
            try:
                self.tick(self._clock_ms())
            except Exception:
                log.exception("periodic commit log flush failed")

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._flush(0)
