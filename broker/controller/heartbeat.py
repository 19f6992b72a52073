"""Broker liveness as one controller sees it (RocketMQ's DefaultBrokerHeartbeatManager): local
to each controller, never replicated, which is why brokers heartbeat every controller.

A broker is alive while ``now - lastUpdate <= heartbeatTimeoutMillis`` on the injected clock's
monotonic time. The (epoch, maxOffset, confirmOffset) kept are the broker's latest report, where
RocketMQ keeps the highest within an epoch: a broker that lost its unflushed tail (a power loss,
a restart before its old entry expired) or cut its log reports less, and an election ranking it
by the stale higher figure could take a log that lacks bytes another candidate holds.

The table is the process's memory: a restarted controller starts empty, so a master it has not
heard from yet may still hold its lease (``lease_may_hold``) until ``grace_ms`` after
the start: ``brokerHeartbeatTimeoutMaxMs``, the longest heartbeat timeout a broker may use (the
processor refuses a longer one; default 10 s, the brokers' default). Likewise a controller
that begins to lead (``on_leadership``, a new Raft term): the old leader may have renewed a
master's lease that this one's table holds as long silent (its link to the master broke
earlier), until a fallback before this term began; the lease may hold until a heartbeat timeout
after it (``broker/ha/lease_ack.py`` has the timing).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.clock import Clock

DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000  # DEFAULT_BROKER_CHANNEL_EXPIRED_TIME
# after a start, an unheard-of master's lease (at most 80 % of its heartbeat timeout, the
# brokers' controllerHeartBeatTimeoutMills) may still hold this long
RESTART_GRACE_MS = DEFAULT_HEARTBEAT_TIMEOUT_MS  # the default; brokerHeartbeatTimeoutMaxMs
HEARTBEAT_TIMEOUT_RANGE_MS = (100, 600_000)  # what a heartbeat may name at all
DEFAULT_ELECTION_PRIORITY = 2**31 - 1  # Integer.MAX_VALUE: lower wins

MAX_LIVE_BROKERS = 10_000  # a bound on what the network can make this table hold

BrokerKey = tuple[str, str, int]  # (clusterName, brokerName, brokerId)


@dataclass
class BrokerLiveInfo:
    brokerName: str
    brokerAddr: str
    brokerId: int
    lastUpdateMs: float
    heartbeatTimeoutMs: int
    epoch: int
    maxOffset: int
    confirmOffset: int
    electionPriority: int
    channel: object | None = None  # the connection it last heartbeated on
    closed: bool = False  # that connection closed: not alive, though its lease may hold


class BrokerHeartbeatManager:
    """``on_heartbeat`` records, ``is_alive`` / ``live_info`` answer, ``scan_not_active``
    drops the expired and returns their keys (the caller triggers elections)."""

    def __init__(self, clock: Clock, grace_ms: int = RESTART_GRACE_MS) -> None:
        self.clock = clock
        self.grace_ms = grace_ms  # brokerHeartbeatTimeoutMaxMs: no broker's timeout is longer
        self.table: dict[BrokerKey, BrokerLiveInfo] = {}
        self.started_ms = clock.monotonic_ms()
        self.heard: set[BrokerKey] = set()  # every broker heard from since the start (bounded)
        self.leading_since_ms: float | None = None

    def on_leadership(self) -> None:
        """This controller leads from now on, in a new term."""
        self.leading_since_ms = self.clock.monotonic_ms()

    def on_heartbeat(
        self,
        cluster: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        *,
        timeout_ms: int | None = None,
        epoch: int | None = None,
        max_offset: int | None = None,
        confirm_offset: int | None = None,
        priority: int | None = None,
        channel: object | None = None,
    ) -> bool:
        """False (nothing recorded) when a new broker would grow the table past its bound."""
        key = (cluster, broker_name, broker_id)
        now = self.clock.monotonic_ms()
        real_epoch = -1 if epoch is None else epoch
        real_max = -1 if max_offset is None else max_offset
        real_confirm = -1 if confirm_offset is None else confirm_offset
        real_timeout = DEFAULT_HEARTBEAT_TIMEOUT_MS if timeout_ms is None else timeout_ms
        real_priority = DEFAULT_ELECTION_PRIORITY if priority is None else priority
        prev = self.table.get(key)
        if prev is None:
            if len(self.table) >= MAX_LIVE_BROKERS:
                return False
            if len(self.heard) < MAX_LIVE_BROKERS:  # (past it: the grace holds for the rest)
                self.heard.add(key)
            self.table[key] = BrokerLiveInfo(
                broker_name,
                broker_addr,
                broker_id,
                now,
                real_timeout,
                real_epoch,
                real_max,
                real_confirm,
                real_priority,
                channel,
            )
            return True
        prev.lastUpdateMs = now
        prev.closed = False
        prev.heartbeatTimeoutMs = real_timeout
        prev.electionPriority = real_priority
        prev.brokerAddr = broker_addr
        if channel is not None:
            prev.channel = channel
        prev.epoch, prev.maxOffset, prev.confirmOffset = real_epoch, real_max, real_confirm
        return True

    def is_alive(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        info = self.table.get((cluster, broker_name, broker_id))
        if info is None or info.closed:
            return False
        return self.clock.monotonic_ms() - info.lastUpdateMs <= info.heartbeatTimeoutMs

    def lease_may_hold(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        """Whether the broker may still believe itself alive: its last heartbeat is within its
        timeout, even if its connection closed since. A master's lease (at most 80 % of that
        timeout, counted from a heartbeat sent before this one arrived) may hold until then. One
        never heard from since this controller started may hold one until ``grace_ms``
        after the start (its last heartbeat went to the process before); any may hold one until
        its timeout after this controller began to lead (the leader before renewed it)."""
        key = (cluster, broker_name, broker_id)
        info = self.table.get(key)
        now = self.clock.monotonic_ms()
        since = self.leading_since_ms
        timeout_ms = self.grace_ms if info is None else info.heartbeatTimeoutMs
        if since is not None and now - since <= timeout_ms:
            return True
        if info is None:  # expired since (its lease ended with it), or never heard from
            return key not in self.heard and now - self.started_ms <= self.grace_ms
        return now - info.lastUpdateMs <= info.heartbeatTimeoutMs

    def live_info(self, cluster: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        return self.table.get((cluster, broker_name, broker_id))

    def scan_not_active(self) -> list[BrokerKey]:
        """Drop every broker silent for longer than its timeout; the keys of those still alive
        until now (a closed one was reported at its close), in key order."""
        now = self.clock.monotonic_ms()
        gone = sorted(
            key
            for key, info in self.table.items()
            if now - info.lastUpdateMs > info.heartbeatTimeoutMs
        )
        dropped = [key for key in gone if not self.table[key].closed]
        for key in gone:
            del self.table[key]
        return dropped

    def on_channel_close(
        self, channel: object, masters: frozenset[BrokerKey] = frozenset()
    ) -> list[BrokerKey]:
        """A broker's connection closed (BrokerHousekeepingService): it is not alive any more;
        the keys dropped. A master in ``masters`` stays alive until its heartbeat timeout: a
        closed connection may be a cut link (a reset, a timeout), and the master takes writes
        until its lease ends, which is within that timeout (RocketMQ elects at once: #7017)."""
        mine = sorted(key for key, info in self.table.items() if info.channel is channel)
        for key in mine:
            self.table[key].channel = None
        gone = [key for key in mine if key not in masters]
        for key in gone:  # kept until its timeout: ``lease_may_hold`` still answers for it
            self.table[key].closed = True
        return gone
