"""Known bugs the deterministic simulation (``haproof sim --inject-bug NAME``) switches on in
the real code path, to prove it catches them. Off unless the simulation sets them, or a
process is started with ``HAPROOF_PLANTED_BUG=NAME[,NAME]`` in its environment (read once at
start by ``broker/cli.py``; ``haproof chaos --inject-bug NAME`` starts its processes so); each
switch is read at the bug's site (``if planted_bugs.active("early-ack")``), nowhere else.

- ``nondurable-truncation`` (RocketMQ #10666): a rejoining node's truncation zeroes its tail
  without making the zeros durable before it serves; a crash brings the stale tail back.
  Site: ``broker/store/mapped_file.py`` ``MappedFile.truncate_to``.
- ``early-ack``: a SYNC_FLUSH slave reports (acknowledges) replicated bytes before they are
  flushed, so a SYNC_MASTER answers for bytes no disk holds. Site: ``broker/ha/client.py``.
- ``unclean-election``: promotion takes a node that is behind another reachable one ("in
  sync" is "not behind a reachable node" without a controller); the controller's election
  takes any alive replica as if in the SyncStateSet. Sites: ``broker/ha/promotion_rules.py``
  ``refuse_unclean``, ``broker/controller/election.py`` ``choose``.
- ``election-overflow`` (RocketMQ #10578): the election ranks candidates with DefaultElectPolicy's
  overflowing comparator ``(int)(o2.maxOffset - o1.maxOffset)``. The simulation's logs hold
  kilobytes, not gigabytes, so it wraps at ``OVERFLOW_BITS`` (10 there, Java's 32 otherwise).
  Site: ``broker/controller/election.py`` ``choose``.
- ``write-after-lease``: a master whose lease ended (no heartbeat acknowledged by the controller
  leader for ``controllerLeaseMills``) is not fenced and keeps taking writes (#7017's two
  masters). Site: ``broker/ha/controller_client.py`` ``_check_lease``.
- ``offset-copy``: consumer offset commits are not records of the log (``offsetCommitThroughLog``
  off, RocketMQ's behaviour): a master answers a commit from its table, slaves get the table
  only by SlaveSynchronize's periodic copy, and a restart or a failover answers an older
  offset. Site: ``broker/node.py`` ``BrokerNode.__init__``.
"""

from __future__ import annotations

# name -> what the bug does
KNOWN: dict[str, str] = {
    "nondurable-truncation": "a rejoin truncation is not made durable before serving (#10666)",
    "early-ack": "a slave acknowledges replicated bytes before flushing them",
    "unclean-election": "promotion of a node behind another reachable one (outside the in-sync set)",
    "election-overflow": "the election's comparator overflows on log ends far apart (#10578)",
    "write-after-lease": "a master keeps taking writes after its lease ended (#7017)",
    "offset-copy": "offset commits reach slaves only by the periodic copy (no offset log)",
}
PENDING: dict[str, str] = {}
# the integer width of election-overflow's comparator (the simulation narrows it to its logs)
OVERFLOW_BITS = 32

ENV = "HAPROOF_PLANTED_BUG"

_active: set[str] = set()


def active(name: str) -> bool:
    """Whether the planted bug ``name`` is switched on (only ever by the simulation)."""
    return name in _active


def switch_on(names: set[str] | frozenset[str]) -> None:
    unknown = set(names) - set(KNOWN)
    if unknown:
        raise ValueError(f"unknown planted bug(s): {', '.join(sorted(unknown))}")
    _active.clear()
    _active.update(names)


def switch_off() -> None:
    _active.clear()


def switch_on_from_env(environ) -> None:
    """At a process's start: the bugs ``HAPROOF_PLANTED_BUG`` names (comma-separated), if any;
    an unknown name is a ValueError (the process must not run with a typo'd bug)."""
    names = {n.strip() for n in environ.get(ENV, "").split(",") if n.strip()}
    if names:
        switch_on(names)


def active_names() -> list[str]:
    return sorted(_active)
