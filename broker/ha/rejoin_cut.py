"""A rejoining node's cut to the point its log shares with the new master, crash-safe
(RocketMQ #10666), done before the node replicates or serves anything.

Order (each step durable before the next):

1. ``rejoin_marker``: the store's truncation marker (``broker/store/truncation.py``) is written
   with the cut and the old log end: from here on, a restart cuts the log before reading it;
2. ``epochs_cut``: the epoch file drops the epochs that start at or above the cut (RocketMQ's
   truncateSuffixByOffset), written atomically: it never names bytes the log will not hold;
3. the store's cut (``marker``, ``commitlog``: zeroed, msync'ed, deleted files' directory
   fsynced, ``queues``), told to the truncate listeners (the archive's ``truncated`` event)
   before its marker is removed;
4. ``epochs_adopted``: the master's epochs, written atomically.

A crash anywhere leaves a store that the next open cuts (while the marker exists; the node's
start then drops the epochs beyond it, ``finish_interrupted``) or one already cut with an epoch
file that names no byte beyond it; the rejoin then runs again and finds nothing more to cut.
``on_step`` is called with each step's name (the fault hook).
"""

from __future__ import annotations

from collections.abc import Callable

from broker.store import truncation
from broker.store.epoch import EpochEntry

OnStep = Callable[[str], None]


def epochs_below(entries: list[EpochEntry], offset: int) -> list[EpochEntry]:
    """The entries that still describe bytes once the log ends at ``offset``."""
    return [e for e in entries if e.start_offset < offset]


def rejoin_cut(
    store,
    role,
    point: int,
    theirs: list[EpochEntry],
    notify: Callable[[int, int], None],
    on_step: OnStep | None = None,
) -> None:
    """Cut ``store`` to ``point`` and take the master's epochs ``theirs`` (see the module's
    text). ``role``: the node's role state (``epoch_entries``, ``adopt_epochs``);
    ``notify(old_end, point)``: the node's truncate listeners."""
    step = on_step or (lambda _name: None)
    old_end = store.max_phy_offset
    truncation.mark(store.root, point, old_end)
    step("rejoin_marker")
    kept = epochs_below(role.epoch_entries, point)
    if kept != list(role.epoch_entries):
        role.adopt_epochs(kept)
    step("epochs_cut")

    def store_step(name: str) -> None:
        step(name)
        if name == "queues":  # cut and durable; the marker still there
            notify(old_end, point)

    store.truncate_dirty(point, store_step)
    if theirs:
        role.adopt_epochs(theirs)
    step("epochs_adopted")


def finish_interrupted(store, role) -> int | None:
    """At a node's start, after its store opened (which finished an interrupted cut), before
    it replicates or serves: drop the epochs the cut left without bytes. The cut's offset, or
    None when none was interrupted. (The archive's ``truncated`` event for it is one of the
    archiver's start events, ``broker/archive/node_view.py``: its listener is not registered
    yet when this runs.)"""
    found = store.finished_cut
    if found is None:
        return None
    kept = epochs_below(role.epoch_entries, found[0])
    if kept != list(role.epoch_entries):
        role.adopt_epochs(kept)
    return found[0]
