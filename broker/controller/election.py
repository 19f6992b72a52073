"""Who becomes master (RocketMQ's DefaultElectPolicy, and safer).

- Candidates are the alive members of the SyncStateSet; only with ``enableElectUncleanMaster``
  does the policy fall back to every alive replica, and such a choice is recorded as unclean.
- The old master, still alive and in the set, stays (unless another broker is designated).
- A designated broker (``electMaster`` admin, ``designateElect``) is chosen if it is an alive
  candidate, else nobody.
- Otherwise the best by (epoch desc, maxOffset desc, electionPriority asc), then the lowest
  brokerId so the choice never depends on set order. Compared as Python integers by a sort key:
  no subtraction, so no overflow (RocketMQ #10578: ``(int)(o2.maxOffset - o1.maxOffset)``
  elected a shorter log when two offsets differ by more than 2^31).
- The very first election of a broker set (masterEpoch 0, empty set) ranks every alive
  registered replica the same way, the requester included, where RocketMQ takes the first
  asker without comparing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from broker import planted_bugs
from broker.controller.events import Candidate
from broker.controller.heartbeat import BrokerLiveInfo


class Liveness(Protocol):
    def is_alive(self, cluster: str, broker_name: str, broker_id: int) -> bool: ...

    def lease_may_hold(self, cluster: str, broker_name: str, broker_id: int) -> bool: ...

    def live_info(
        self, cluster: str, broker_name: str, broker_id: int
    ) -> BrokerLiveInfo | None: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    new_master: int | None
    unclean: bool
    candidates: tuple[Candidate, ...]


def rank_key(c: Candidate) -> tuple[int, int, int, int]:
    """Smaller is better: higher epoch, then higher maxOffset, then lower priority, lower id."""
    return (-c.epoch, -c.maxOffset, c.priority, c.brokerId)


def _overflowing_compare(o1: Candidate, o2: Candidate) -> int:
    """The planted ``election-overflow`` (RocketMQ #10578): DefaultElectPolicy's comparator
    ``(int) (o2.maxOffset - o1.maxOffset)``, the difference wrapped to a signed integer of
    ``planted_bugs.OVERFLOW_BITS`` bits, so a log longer by more than half that range sorts
    as the shorter one."""
    if o1.epoch != o2.epoch:
        return o2.epoch - o1.epoch
    half = 1 << (planted_bugs.OVERFLOW_BITS - 1)
    diff = ((o2.maxOffset - o1.maxOffset + half) % (2 * half)) - half
    if diff != 0:
        return diff
    return rank_key(o1) > rank_key(o2) or -(rank_key(o1) < rank_key(o2))


def candidate(
    live: Liveness, cluster: str, name: str, broker_id: int, addr: str, in_set: bool
) -> Candidate:
    info = live.live_info(cluster, name, broker_id)
    alive = live.is_alive(cluster, name, broker_id)
    if info is None:
        return Candidate(broker_id, addr, -1, -1, -1, 2**31 - 1, in_set, alive)
    return Candidate(
        broker_id,
        addr,
        info.epoch,
        info.maxOffset,
        info.confirmOffset,
        info.electionPriority,
        in_set,
        alive,
    )


def choose(
    candidates: Iterable[Candidate],
    *,
    old_master: int | None,
    designated: int | None,
    unclean_allowed: bool,
    first_election: bool = False,
) -> tuple[int | None, bool]:
    """(new master or None, unclean). ``candidates``: every registered replica as seen now."""
    everyone = list(candidates)
    unclean_bug = planted_bugs.active("unclean-election")  # the whole group counts as in sync
    pools = [
        [c for c in everyone if c.alive and (c.inSyncStateSet or first_election or unclean_bug)]
    ]
    if unclean_allowed and not first_election:
        pools.append([c for c in everyone if c.alive])
    if planted_bugs.active("unclean-election") and not first_election:
        pools.insert(0, [c for c in everyone if c.alive and not c.inSyncStateSet])
    for round_no, pool in enumerate(pools):
        ids = {c.brokerId for c in pool}
        if not ids:
            continue
        if old_master in ids and designated in (None, old_master):
            return old_master, False
        if designated is not None:
            if designated in ids:
                return designated, round_no > 0
            continue
        if planted_bugs.active("election-overflow"):
            best = min(pool, key=functools.cmp_to_key(_overflowing_compare))
        else:
            best = min(pool, key=rank_key)
        return best.brokerId, round_no > 0
    return None, False
