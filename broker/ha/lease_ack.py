"""What a controller's heartbeat answer is worth to a master's lease.

A haproof controller answers BROKER_HEARTBEAT (904) with two fields RocketMQ's controller does
not send (RocketMQ's brokers ignore them): ``isLeader``, whether it leads at answer time, and
``leaderFallbackMs`` (F), how long a Raft leader may go on leading after it last heard from a
majority (PySyncObj's ``leaderFallbackTimeout``, ``jRaftLeaderFallbackTimeoutMs``; 0 for the
journal's single controller). An answer renews the lease only when it says ``isLeader=true``,
and then from the heartbeat's send time less F. An answer without the fields (RocketMQ's
controller, a haproof controller before them) renews nothing: upgrade the controllers first.

Why this holds (F fallback, L lease, I heartbeat interval, H heartbeat timeout, d one tick of
PySyncObj (50 ms) plus the answer's latency):

1. A controller A answering ``isLeader=true`` at time t heard from a majority after
   t - F - d: PySyncObj's leader steps down at the first tick after F without one.
2. A later leader B was voted in by a majority; it shares a member with A's majority, which
   answered A before it voted for B (a voter of a later term refuses A's). So every
   ``isLeader=true`` A gives satisfies t - F - d < t_c, where t_c is the last time A heard
   from B's quorum, before B leads.
3. The master renews from s - F, s <= t its send time: its lease ends by s - F + L < t_c + d + L.
4. B elects another master only once the old one is not alive in its own table, H after the
   last heartbeat that reached B; cut off with A from B's side at t_c, that one was sent after
   t_c - I: no election before t_c - I + H.
5. So one writer at a time when L + I + d < H. The broker's config load checks L + I <= 0.9 H
   (``broker/config_checks.py``), a tenth of H for d (the defaults H 10 s, L 8 s, I 1 s: 1 s).
   F drops out: counting from s - F costs the lease F of its length instead (L - F must exceed
   I, or the master fences between beats: ``lease_ack`` refuses an F of L or more, logged
   naming the keys).

Without step 3's "less F" (main before this), A kept answering for up to PySyncObj's default
30 s after losing the majority, and the master's lease outlived B's election (two writers,
RocketMQ #7017). A leader whose link to the master broke long before (step 4's last heartbeat
older than t_c - I) is not covered: see docs/controller.md, "Leases and the Raft leader".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from broker.remoting.codes import ResponseCode as RC
from broker.remoting.command import RemotingCommand

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseAck:
    leading: bool  # the controller answered SUCCESS and leads at answer time
    renews_from_ms: float | None  # monotonic time the lease is renewed from; None: not renewed


def lease_ack(resp: RemotingCommand, sent_ms: float, lease_ms: int) -> LeaseAck:
    """What the answer to a heartbeat sent at ``sent_ms`` (monotonic) does to a lease of
    ``lease_ms``. Nothing in the answer is trusted: a fallback that is not an integer in
    [0, lease_ms) renews nothing."""
    fields = resp.ext_fields
    if resp.code != RC.SUCCESS or fields.get("isLeader") != "true":
        return LeaseAck(False, None)
    raw = fields.get("leaderFallbackMs")
    try:
        fallback_ms = int(raw) if raw is not None else None
    except ValueError:
        fallback_ms = None
    if fallback_ms is None or not 0 <= fallback_ms < lease_ms:
        log.error(
            "controller heartbeat answer with leaderFallbackMs %r: renews no lease of "
            "controllerLeaseMills %d (it must be an integer from 0 to below the lease; the "
            "controllers' jRaftLeaderFallbackTimeoutMs must be below controllerLeaseMills "
            "less brokerHeartbeatInterval)",
            raw if raw is None else raw[:40],
            lease_ms,
        )
        return LeaseAck(True, None)
    return LeaseAck(True, sent_ms - fallback_ms)
