"""Counters per key with RocketMQ's StatsItem windows (BrokerStatsManager's TOPIC_PUT_NUMS per
topic, GROUP_GET_NUMS per ``topic@group``): the last minute, hour and day, each as ``sum`` (what
was counted in the window), ``tps`` (per second over it) and ``avgpt`` (per call), read by
VIEW_BROKER_STATS_DATA (mqadmin statsAll).

Snapshots are kept every 10 s for the minute, every minute for the hour, every hour for the day
(``sample(now_ms)`` is called once a second and takes what is due), so each key holds at most
~100 points; a key's first count seeds every window with a zero, so a window covers what was
counted since then. At most ``MAX_KEYS`` keys are kept (names come from clients): beyond it a new
key is not counted, and that is logged once.
"""

from __future__ import annotations

import collections
import logging

log = logging.getLogger(__name__)

MAX_KEYS = 10_000
# window name -> (snapshot every ms, snapshots kept)
WINDOWS = {"statsMinute": (10_000, 7), "statsHour": (60_000, 61), "statsDay": (3_600_000, 25)}


class KeyedStats:
    def __init__(self, what: str) -> None:
        self.what = what
        self.counts: dict[str, list[int]] = {}  # key -> [value, calls]
        self._rings: dict[str, dict[str, collections.deque]] = {}
        self._due_ms = {name: 0 for name in WINDOWS}
        self._full_logged = False

    def add(self, key: str, value: int, now_ms: int) -> None:
        counts = self.counts.get(key)
        if counts is None:
            if len(self.counts) >= MAX_KEYS:
                if not self._full_logged:
                    log.warning("%s: %d keys kept, new ones are not counted", self.what, MAX_KEYS)
                    self._full_logged = True
                return
            counts = self.counts[key] = [0, 0]
            self._rings[key] = {
                name: collections.deque([(now_ms, 0, 0)], maxlen=kept)
                for name, (_every, kept) in WINDOWS.items()
            }
        counts[0] += value
        counts[1] += 1

    def sample(self, now_ms: int) -> None:
        for name, (every_ms, _kept) in WINDOWS.items():
            if now_ms < self._due_ms[name]:
                continue
            self._due_ms[name] = now_ms + every_ms
            for key, rings in self._rings.items():
                value, calls = self.counts[key]
                rings[name].append((now_ms, value, calls))

    def windows(self, key: str, now_ms: int) -> dict | None:
        """BrokerStatsData's JSON for ``key`` (None: never counted)."""
        if key not in self.counts:
            return None
        value, calls = self.counts[key]
        out = {}
        for name, ring in self._rings[key].items():
            first_ms, first_value, first_calls = ring[0]
            total, n = value - first_value, calls - first_calls
            span_ms = max(1, now_ms - first_ms)
            out[name] = {
                "sum": total,
                "tps": round(total * 1000 / span_ms, 2),
                "avgpt": round(total / n, 2) if n else 0.0,
            }
        return out
