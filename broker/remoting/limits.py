"""What a remoting server lets a peer hold: connections, idle time, a frame in progress, and the
bytes of partial frames across all connections. Transport only: no request is looked at here.

- ``idle_timeout_ms`` (RocketMQ's ``serverChannelMaxIdleTimeSeconds``, 120 s): a connection with
  nothing read or written and no request in progress for that long is closed.
- ``frame_read_timeout_ms``: a frame whose first byte arrived that long ago and is still not
  whole is dropped with its connection (a peer sending a byte a second).
- ``max_connections``: one more is accepted and closed at once. Lowered at start to what the
  process's open-file limit leaves (``fit_to_fd_limit``), so the cap, not EMFILE, refuses.
- ``max_connections_per_host``: the same, counted per remote address, so one host cannot take
  every connection and lock the others out.
- ``max_pending_bytes``: the bytes of partial frames over all connections; above it the
  connections holding the oldest partial frames are dropped until the total fits again, so a
  hog cannot starve well-formed clients whose frames complete quickly.
- ``max_unread_bytes``: responses a peer has not read yet (reading its requests pauses at
  1 MiB, but what was already read still gets answered); above it the peer is dropped.

Each refusal is logged with the peer, at most once a minute per kind and host (``RefusalLog``).
The clock is injectable so tests drive deadlines without sleeping.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("broker.remoting.limits")

Clock = Callable[[], float]  # seconds, monotonic

DEFAULT_IDLE_TIMEOUT_MS = 120_000
DEFAULT_FRAME_READ_TIMEOUT_MS = 30_000
DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_MAX_CONNECTIONS_PER_HOST = 1024
DEFAULT_MAX_PENDING_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_UNREAD_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ServerLimits:
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS
    frame_read_timeout_ms: int = DEFAULT_FRAME_READ_TIMEOUT_MS
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES
    max_unread_bytes: int = DEFAULT_MAX_UNREAD_BYTES
    max_connections_per_host: int = DEFAULT_MAX_CONNECTIONS_PER_HOST

    def __post_init__(self) -> None:
        positive = ("idle_timeout_ms", "frame_read_timeout_ms", "max_connections")
        for name in (*positive, "max_connections_per_host"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_pending_bytes < 64 * 1024:
            raise ValueError(
                f"max_pending_bytes must be at least 64 KiB, got {self.max_pending_bytes}"
            )

    @property
    def sweep_interval_ms(self) -> int:
        """How often deadlines are checked: a quarter of the shortest, between 10 ms and 1 s."""
        shortest = min(self.idle_timeout_ms, self.frame_read_timeout_ms)
        return max(10, min(1000, shortest // 4))

    @classmethod
    def from_config(cls, config) -> ServerLimits:
        """From a BrokerConfig (its remoting keys), defaults for any it lacks."""
        return cls(
            idle_timeout_ms=1000
            * getattr(config, "server_channel_max_idle_time_s", DEFAULT_IDLE_TIMEOUT_MS // 1000),
            frame_read_timeout_ms=getattr(
                config, "remoting_frame_read_timeout_ms", DEFAULT_FRAME_READ_TIMEOUT_MS
            ),
            max_connections=getattr(config, "remoting_max_connections", DEFAULT_MAX_CONNECTIONS),
            max_pending_bytes=getattr(
                config, "remoting_max_pending_bytes", DEFAULT_MAX_PENDING_BYTES
            ),
            max_connections_per_host=getattr(
                config, "remoting_max_connections_per_host", DEFAULT_MAX_CONNECTIONS_PER_HOST
            ),
        )


FD_RESERVE = 256  # descriptors kept for store files, outgoing connections, logs


def fit_to_fd_limit(limits: ServerLimits) -> ServerLimits:
    """``limits`` with max_connections lowered to the open-file limit minus FD_RESERVE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or limits.max_connections <= soft - FD_RESERVE:
        return limits
    fitted = max(1, soft - FD_RESERVE)
    log.warning(
        "remoting: max connections %d lowered to %d: the open-file limit is %d (ulimit -n)",
        limits.max_connections, fitted, soft,
    )  # fmt: skip
    return dataclasses.replace(limits, max_connections=fitted)


def peer_host_of(peer: str) -> str:
    """'10.0.0.1:5555' -> '10.0.0.1'."""
    return peer.rpartition(":")[0] or peer


class RefusalLog:
    """Logs a refusal once per ``interval_s`` for each (kind, host), counting the rest; the
    table is bounded (the oldest key goes first), so a flood from many hosts costs no memory."""

    def __init__(self, clock: Clock = time.monotonic, interval_s: float = 60.0,
                 max_keys: int = 1024) -> None:  # fmt: skip
        self.clock, self.interval_s, self.max_keys = clock, interval_s, max_keys
        self._seen: dict[tuple[str, str], list] = {}  # key -> [last logged at, suppressed]
        self.total = 0  # every refusal, logged or not (tests, status)

    def refuse(self, kind: str, peer: str, reason: str, level: int = logging.WARNING) -> None:
        self.total += 1
        host = peer.rsplit(":", 1)[0]
        key = (kind, host)
        now = self.clock()
        entry = self._seen.get(key)
        if entry is not None and now - entry[0] < self.interval_s:
            entry[1] += 1
            return
        suppressed = entry[1] if entry is not None else 0
        self._seen.pop(key, None)
        if len(self._seen) >= self.max_keys:
            self._seen.pop(next(iter(self._seen)))
        self._seen[key] = [now, 0]
        more = f" ({suppressed} more from {host} not logged)" if suppressed else ""
        log.log(level, "remoting: %s %s: %s%s", kind, peer, reason, more)


class ConnectionGuard:
    """A server's live connections and its partial-frame budget. A connection calls ``admit``
    when made, ``account`` after each read, ``release`` when closed; the server calls ``sweep``
    every ``limits.sweep_interval_ms`` (or a test calls it with its own clock)."""

    def __init__(self, limits: ServerLimits | None = None, clock: Clock = time.monotonic) -> None:
        self.limits = limits or ServerLimits()
        self.clock = clock
        self.connections: set = set()
        self.per_host: dict[str, int] = {}  # remote address -> its open connections
        self.pending_bytes = 0  # over all connections' partial frames
        self._partial: dict = {}  # connection -> its pending bytes (> 0 only)
        self.refusals = RefusalLog(clock)

    def admit(self, conn) -> bool:
        if len(self.connections) >= self.limits.max_connections:
            self.refusals.refuse(
                "refused connection from", conn.peer,
                f"{len(self.connections)} connections open (remotingMaxConnections="
                f"{self.limits.max_connections})",
            )  # fmt: skip
            return False
        host = peer_host_of(conn.peer)
        held = self.per_host.get(host, 0)
        if held >= self.limits.max_connections_per_host:
            limit = self.limits.max_connections_per_host
            why = f"{held} connections open from {host} (remotingMaxConnectionsPerHost={limit})"
            self.refusals.refuse("refused connection from", conn.peer, why)
            return False
        self.per_host[host] = held + 1
        self.connections.add(conn)
        return True

    def release(self, conn) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            host = peer_host_of(conn.peer)
            left = self.per_host.get(host, 1) - 1
            if left > 0:
                self.per_host[host] = left
            else:
                self.per_host.pop(host, None)
        self.account(conn, 0)

    def account(self, conn, pending: int) -> None:
        """``conn`` now holds ``pending`` bytes of a partial frame; over budget, the oldest
        partial frames go (possibly this one)."""
        self.pending_bytes += pending - self._partial.pop(conn, 0)
        if pending:
            self._partial[conn] = pending
        if self.pending_bytes <= self.limits.max_pending_bytes:
            return
        for victim in sorted(self._partial, key=lambda c: c.frame_started_s or 0.0):
            if self.pending_bytes <= self.limits.max_pending_bytes:
                break
            self.refusals.refuse(
                "dropped", victim.peer,
                f"partial frames hold {self.pending_bytes} bytes over all connections "
                f"(remotingMaxPendingBytes={self.limits.max_pending_bytes}); this one's "
                f"{self._partial.get(victim, 0)} bytes are the oldest",
            )  # fmt: skip
            victim.abort_with("partial-frame budget exceeded")  # releases: pending drops

    def check_unread(self, conn, unread: int) -> None:
        """Called after each write: a peer sitting on too many unread responses goes."""
        if unread > self.limits.max_unread_bytes:
            self.refusals.refuse(
                "dropped", conn.peer,
                f"{unread} bytes of responses unread (at most {self.limits.max_unread_bytes})",
            )  # fmt: skip
            conn.abort_with("responses left unread")

    def sweep(self, now: float | None = None) -> None:
        """Close connections idle too long or slow to finish a frame."""
        now = self.clock() if now is None else now
        idle_s = self.limits.idle_timeout_ms / 1000
        frame_s = self.limits.frame_read_timeout_ms / 1000
        for conn in list(self.connections):
            started = conn.frame_started_s
            if started is not None and now - started > frame_s:
                self.refusals.refuse(
                    "dropped", conn.peer,
                    f"a frame in progress for over {self.limits.frame_read_timeout_ms} ms "
                    f"({conn.pending_bytes} bytes so far)",
                )  # fmt: skip
                conn.abort_with("frame read deadline passed")
            elif now - conn.last_io_s > idle_s and not conn.busy:
                self.refusals.refuse(
                    "closed idle", conn.peer,
                    f"nothing read or written for over {self.limits.idle_timeout_ms} ms",
                    logging.INFO,
                )  # fmt: skip
                conn.close_soon("idle timeout")
