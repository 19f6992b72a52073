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
- ``unclean-election``: promotion takes a node that is behind another reachable one (until the
  controller of issue #30 keeps a SyncStateSet, "in sync" is "not behind a reachable node").
  Site: ``broker/ha/failover.py`` ``_refuse_unclean``; in controller mode the election
  itself prefers an alive replica outside the SyncStateSet: ``broker/controller/election.py``
  ``choose``.
"""

from __future__ import annotations

# name -> what the bug does; the pending ones need the simulation to run the controller and
# the broker-side lease of issue #30 (on main, not yet wired into the nodes or the simulation)
KNOWN: dict[str, str] = {
    "nondurable-truncation": "a rejoin truncation is not made durable before serving (#10666)",
    "early-ack": "a slave acknowledges replicated bytes before flushing them",
    "unclean-election": "promotion of a node behind another reachable one (outside the in-sync set)",
}
PENDING: dict[str, str] = {
    "election-overflow": "election comparator overflow (#10578): needs the simulation to run "
    "the controller of #30",
    "write-after-lease": "a master writing after its lease: needs the simulation to run the "
    "controller client's lease (#30)",
}

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
