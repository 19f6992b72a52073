"""Message ids as RocketMQ's clients make them (``UNIQ_KEY``, the producer's ``msgId``).

16 bytes, written as 32 upper-case hex digits::

    ip          4 bytes  the producer host's IPv4 address
    pid         2 bytes  its process id, low 16 bits
    instance    4 bytes  Java: the class loader's hash code; here random per process
    elapsed_ms  4 bytes  milliseconds since 00:00 local time on the 1st of this month
    counter     2 bytes  per process, wraps at 65536

The first 10 bytes are fixed per process, so an id costs a clock read and a counter step
(1.1 us against 2.7 us for ``uuid4`` here). RocketMQ's tools read the send time back from
the last 6 bytes (``nearly_time_ms`` below does the same).
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import socket
import struct
import time

# ip (4) pid (2, low bits) instance (4): the fixed prefix
_PREFIX = struct.Struct(">4sHI")


def _host_ip() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return bytes([127, 0, 0, 1])


def month_start_ms(now_ms: int) -> int:
    """00:00 local time on the 1st of ``now_ms``'s month, in epoch ms."""
    now = dt.datetime.fromtimestamp(now_ms / 1000).astimezone()
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(first.timestamp() * 1000)


class UniqIdGenerator:
    def __init__(self, ip: bytes | None = None, pid: int | None = None) -> None:
        self._ip, self._pid = ip, pid
        self.reset()

    def reset(self) -> None:
        """A new prefix and counter (a forked child must not repeat its parent's ids)."""
        prefix = _PREFIX.pack(
            self._ip or _host_ip(),
            (os.getpid() if self._pid is None else self._pid) & 0xFFFF,
            int.from_bytes(os.urandom(4), "big"),
        )
        self.prefix = prefix.hex().upper()
        self._counter = itertools.count()
        self._start_ms = self._next_start_ms = 0

    def __call__(self) -> str:
        now_ms = time.time_ns() // 1_000_000
        if now_ms >= self._next_start_ms or now_ms < self._start_ms:
            self._roll_month(now_ms)
        elapsed = (now_ms - self._start_ms) & 0xFFFFFFFF
        return f"{self.prefix}{elapsed:08X}{next(self._counter) & 0xFFFF:04X}"

    def _roll_month(self, now_ms: int) -> None:
        self._start_ms = month_start_ms(now_ms)
        # the 1st of next month: 32 days on from the 1st always lands in it
        self._next_start_ms = month_start_ms(self._start_ms + 32 * 86_400_000)


def nearly_time_ms(uniq_id: str, now_ms: int) -> int:
    """When an id was made (to the ms), read from its elapsed field and the month of ``now_ms``
    (the month before when that would put it in the future), as RocketMQ's tools do."""
    elapsed = int(uniq_id[20:28], 16)
    start = month_start_ms(now_ms)
    if start + elapsed >= now_ms:
        start = month_start_ms(start - 1)
    return start + elapsed


def ip_of(uniq_id: str) -> str:
    return socket.inet_ntoa(bytes.fromhex(uniq_id[:8]))


new_uniq_id = UniqIdGenerator()
os.register_at_fork(after_in_child=new_uniq_id.reset)
