"""``haproof archive --follow`` between rounds: a snapshot at every change of the store's
``consumerOffset.json`` (RocketMQ persists it every flushConsumerOffsetInterval, 5 s), so for a
store whose commits are not records in the log (real RocketMQ, ``offsetCommitThroughLog=false``)
the audit's blind window is the file's own cadence, not the shipping interval."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

#: how often the file's size and modification time are looked at
POLL_MS = 200


def file_version(path: str) -> tuple[int, int] | None:
    """(mtime in ns, size) of ``path``, None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


class OffsetsWatch:
    """``on_change()`` ships a snapshot; called from :meth:`wait` when the file changed."""

    def __init__(self, store_dir: str, on_change: Callable[[], None]) -> None:
        self.path = os.path.join(store_dir, "config", "consumerOffset.json")
        self.on_change = on_change
        self.version = file_version(self.path)
        self.snapshots = 0

    def wait(self, stop: threading.Event, interval_ms: int) -> bool:
        """Wait ``interval_ms`` (or until ``stop``), shipping a snapshot at each change of the
        file meanwhile; True when stopped."""
        left = interval_ms
        while left > 0:
            step = min(POLL_MS, left)
            if stop.wait(step / 1000):
                return True
            left -= step
            now = file_version(self.path)
            if now != self.version:
                self.version = now
                self.on_change()
                self.snapshots += 1
        return stop.is_set()
