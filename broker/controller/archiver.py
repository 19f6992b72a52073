"""Ships the controller's records (``elected`` with its candidates, ``election_failed``,
``sync_state_set_changed``) to the archive, where the audit judges every election
(``spark_jobs/elections.py``). Keys and the document check: ``contracts/controller_archive.py``.

Only the leader ships (every controller of a Raft group applies the same events and so holds the
same records; a follower ships nothing). The records are read by sequence from the state machine
(``ControllerStateMachine.records_since``); a record's key is named by its content, so shipping
one again (after a restart, which replays the log, or on a new leader, which starts from the
oldest record it holds) writes nothing new. A record that cannot be written stops the round at
that record (the loop logs the cause) and is tried again next round: records leave in order.

Limits: the state machine keeps the newest ``MAX_RECORDS`` records; a controller that could not
reach the archive for longer than that many elections loses the oldest (counted in ``dropped``
and logged), and a controller restarted from a journal snapshot regenerates only the records of
the events after that snapshot (those before it were shipped while it ran, unless the archive
was unreachable then).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.clock import SYSTEM_CLOCK, Clock
from broker.loop_service import LoopService
from contracts.controller_archive import controller_event_key
from contracts.object_store import ObjectStore

log = logging.getLogger(__name__)

RecordsSince = Callable[[int], list[tuple[int, dict]]]


class ControllerArchiver(LoopService):
    def __init__(
        self,
        records_since: RecordsSince,
        is_leader: Callable[[], bool],
        store: ObjectStore,
        *,
        period_ms: float = 1_000,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__("controller-archiver", period_ms=period_ms, clock=clock)
        self._records_since = records_since
        self._is_leader = is_leader
        self.store = store
        self.shipped_seq = 0  # every record up to this sequence number is in the archive
        self.shipped = 0  # records written (or found already there) by this controller
        self.dropped = 0  # records gone from memory before they were shipped

    async def run_once(self) -> None:
        if not self._is_leader():
            self.shipped_seq = 0  # when leading again: from the oldest record held
            return
        await self.ship()

    async def ship(self) -> int:
        """Write every record after ``shipped_seq``, in order; the number written."""
        records = self._records_since(self.shipped_seq)
        if records and self.shipped_seq and records[0][0] > self.shipped_seq + 1:
            gone = records[0][0] - self.shipped_seq - 1
            self.dropped += gone
            log.warning(
                "controller archiver: %d record(s) left memory before they were "
                "shipped (archive unreachable too long)",
                gone,
            )
        n = 0
        for seq, doc in records:
            key, data = controller_event_key(doc)
            await asyncio.to_thread(self.store.put, key, data)
            self.shipped_seq = seq
            self.shipped += 1
            n += 1
        return n


def open_archiver(config, sm, event_log, clock: Clock = SYSTEM_CLOCK) -> ControllerArchiver | None:
    """The archiver ``config`` asks for (``archiveEnable``, ``archiveRoot``,
    ``archiveIntervalMs``, ``archiveS3Endpoint``, ``archiveS3Region``), or None."""
    if not config.archiveEnable:
        return None
    from contracts.object_store import open_store

    store = open_store(
        config.archiveRoot,
        endpoint_url=config.archiveS3Endpoint or None,
        region=config.archiveS3Region or None,
    )
    return ControllerArchiver(
        sm.records_since,
        event_log.is_leader,
        store,
        period_ms=config.archiveIntervalMs,
        clock=clock,
    )
