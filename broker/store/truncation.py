"""The store's cut at a failover rejoin: commit log and consume queues above an offset, made
durable before anything is served, and finished at the next open when a crash interrupts it
(RocketMQ #10666: its slave truncation only moved in-memory positions, so a restart recovered
the stale tail as valid records).

A ``truncating`` marker (the offset, written atomically: temp file, fsync, rename, directory
fsync) exists from before the first byte changes until the cut is durable:

1. ``marker``: the marker is written;
2. ``commitlog``: the bytes at and above the offset are zeroed and msync'ed, whole files above it
   deleted, and the commit log directory fsynced (a deleted file does not come back);
3. ``queues``: consume queue entries at or above the offset dropped;
4. the marker is removed and the store directory fsynced.

A store opened with the marker present finishes the cut (steps 2 and 4; the consume queues are
then recovered against the cut log) before recovery reads a record. ``on_step`` is called after
each of steps 1-3 with its name: the fault hook tests crash through. The epoch file's part of a
rejoin is ``broker/ha/rejoin_cut.py``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from broker.store.checkpoint import atomic_write
from contracts.errors import StoreError

log = logging.getLogger(__name__)

TRUNCATING = "truncating"  # marker file: a failover truncation in progress (its offset)
STEPS = ("marker", "commitlog", "queues")

OnStep = Callable[[str], None]


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mark(store_root: str, offset: int, log_end: int | None = None) -> None:
    """Write the marker: from now on an open finishes a cut at ``offset`` (``log_end``: where
    the log ended before, kept for the ``truncated`` event a finished cut still owes)."""
    text = str(offset) if log_end is None else f"{offset} {log_end}"
    atomic_write(os.path.join(store_root, TRUNCATING), text.encode())


def marked(store_root: str) -> tuple[int, int | None] | None:
    """(offset, log end before, if recorded) of an unfinished cut, or None."""
    marker = os.path.join(store_root, TRUNCATING)
    try:
        with open(marker, encoding="ascii") as fh:
            words = fh.read().split()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{marker}: unreadable truncation marker: {exc}") from exc
    if len(words) not in (1, 2) or not all(w.isdigit() for w in words):
        raise StoreError(f"{marker}: truncation marker holds {words!r}, not an offset")
    return int(words[0]), (int(words[1]) if len(words) == 2 else None)


def _unmark(store_root: str) -> None:
    os.unlink(os.path.join(store_root, TRUNCATING))
    fsync_dir(store_root)


def cut(store, offset: int, on_step: OnStep | None = None) -> None:
    """Drop ``store``'s commit log and consume queue data at or above ``offset``, durably."""
    step = on_step or (lambda _name: None)
    with store.put_lock:
        log.warning(
            "%s: truncating the commit log [%d, %d)", store.root, offset, store.max_phy_offset
        )
        mark(store.root, offset, store.max_phy_offset)
        step("marker")
        store.commit_log.truncate_dirty(offset)
        fsync_dir(store.config.store_path_commit_log)
        step("commitlog")
        store.cq_table.truncate_dirty(offset)
        store.dispatcher.dispatched_offset = min(store.dispatcher.dispatched_offset, offset)
        step("queues")
        _unmark(store.root)


def finish(store) -> tuple[int, int | None] | None:
    """At open, before recovery: finish a cut a crash interrupted; (offset, log end before it
    if recorded), or None. The node tells its truncate listeners (the archive's ``truncated``
    event), which the crash may have kept from hearing of it."""
    found = marked(store.root)
    if found is None:
        return None
    log.warning("%s: finishing a truncation interrupted at %d", store.root, found[0])
    store.commit_log.truncate_dirty(found[0])
    fsync_dir(store.config.store_path_commit_log)
    _unmark(store.root)
    return found
