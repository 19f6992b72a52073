"""A node's ``log_damaged`` events (``contracts/log_events.py``): shipping stopped at
structural damage in its log, so the archive says so instead of ending early like a node that
lags.

One event per damaged offset: a shipper retried every round (the in-broker archiver backs off
and tries again forever; ``haproof archive`` may be run again and again) finds the event
already there. What the archive holds is read once per shipper, on the first damage it meets;
later ones are remembered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from contracts import archive_layout as layout
from contracts.errors import CorruptRecordError
from contracts.log_events import LOG_DAMAGED, REASON_MAX_CHARS
from contracts.object_store import ObjectStore

log = logging.getLogger(__name__)


#: the block a hole's tail is compared with zeros in (no copy of a whole file at once)
_ZEROS = bytes(1 << 20)


def hole_after(view, pos: int, limit: int, file_start: int, end_limit: int, source: str):
    """A stopped store's records end at ``view[pos]`` (zero bytes where a record would start):
    the end of its written log, or a hole in it when the log goes on (a later file, or data
    after the zeros in this one: a zeroed page over a record's header). The damage as a
    :class:`CorruptRecordError` at ``file_start + pos``, or None at the real end."""
    where = file_start + pos
    if pos < limit and file_start + len(view) < end_limit:
        why = f"zero bytes at {where} where a record should start, and the log goes on after it"
        return CorruptRecordError(source, where, why + f" (to {end_limit}): a hole")
    for at in range(pos, limit, len(_ZEROS)):
        block = view[at : min(limit, at + len(_ZEROS))]
        if block != _ZEROS[: len(block)]:
            why = f"zero bytes at {where} where a record should start, then data before {limit}"
            return CorruptRecordError(source, where, why + f" (from {file_start + at}): a hole")
    return None


class DamageEvents:
    """Writes ``log_damaged`` events under one node's prefix through ``put_event`` (the
    shipper's: its clock and identity), at most one per damaged offset."""

    def __init__(
        self, store: ObjectStore, node_prefix: Callable[[], str], put_event: Callable[..., str]
    ) -> None:
        self.store = store
        self.node_prefix = node_prefix
        self.put_event = put_event
        self._recorded: set[int] | None = None  # offsets the archive holds an event for

    def record(self, damage: CorruptRecordError) -> str | None:
        """The key of the event written for ``damage``, or None when one for its offset was
        written before."""
        recorded = self.recorded()
        if damage.offset in recorded:
            return None
        key = self.put_event(
            LOG_DAMAGED, offset=damage.offset, reason=damage.reason[:REASON_MAX_CHARS]
        )
        recorded.add(damage.offset)
        log.error("log damaged at offset %d (%s): recorded as %s", damage.offset, damage, key)
        return key

    def recorded(self) -> set[int]:
        """The damaged offsets the node's archived events name (read once; an ArchiveError
        reading them leaves them to be read again)."""
        if self._recorded is None:
            found: set[int] = set()
            for info in self.store.list(self.node_prefix() + layout.EVENTS):
                parsed = layout.parse_key(info.key)
                if parsed is None or parsed.event_kind != LOG_DAMAGED:
                    continue
                try:
                    doc = layout.parse_event(self.store.get(info.key), what=info.key)
                except layout.LayoutError as exc:
                    # not an event: the audit reports it as an archive fault; write ours anew
                    log.warning("%s: %s", info.key, exc)
                    continue
                found.add(doc["offset"])
            self._recorded = found
        return self._recorded
