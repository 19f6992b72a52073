"""Cutting the commit log back (a failover's rejoining node drops what its new master never
had), safe against a crash halfway.

A ``truncating`` marker (the offset, written atomically) lives while the bytes are zeroed: a
crash halfway leaves zeros followed by old records, which recovery would otherwise take for
damage; with the marker the next open finishes the truncation first.
"""

from __future__ import annotations

import logging
import os

from broker.store.checkpoint import atomic_write
from broker.store.commit_log import CommitLog
from contracts.errors import StoreError

log = logging.getLogger(__name__)

TRUNCATING = "truncating"  # marker file: a failover truncation in progress (its offset)


def truncate_log(root: str, commit_log: CommitLog, offset: int) -> None:
    """Drop the commit log's bytes at or above ``offset`` under the marker."""
    marker = os.path.join(root, TRUNCATING)
    log.warning("%s: truncating the commit log [%d, %d)", root, offset, commit_log.max_offset)
    atomic_write(marker, str(offset).encode())
    commit_log.truncate_dirty(offset)
    os.unlink(marker)


def finish_interrupted(root: str, commit_log: CommitLog) -> None:
    """A truncation a crash interrupted (its marker is still there): finish it."""
    marker = os.path.join(root, TRUNCATING)
    try:
        with open(marker, encoding="ascii") as fh:
            text = fh.read().strip()
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{marker}: unreadable truncation marker: {exc}") from exc
    if not text.isdigit():
        raise StoreError(f"{marker}: truncation marker holds {text!r}, not an offset")
    offset = int(text)
    log.warning("%s: finishing a truncation interrupted at %d", root, offset)
    commit_log.truncate_dirty(offset)
    os.unlink(marker)
