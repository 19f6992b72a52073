"""A group of controllers on PySyncObj's Raft (``controllerType=jRaft``): the same events, in
the same state machine, replicated by an existing consensus engine (no home-made Raft).

Every controller runs a ``SyncObj`` whose one replicated method applies a batch of encoded
events; the leader decides and proposes, and answers once the batch is committed and applied on
it. PySyncObj persists its log in ``{controllerStorePath}/raft.journal`` and compacts it into
``raft.dump`` (the tables' snapshot). A new leader first commits an empty batch (a barrier, as
RocketMQ's DLedger controller commits an empty entry) so it decides on every committed event.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from broker.controller.config import ControllerConfig
from broker.controller.events import Event, decode_event, encode_event
from broker.controller.state_machine import ControllerStateMachine
from broker.controller.tables import ReplicaTables
from contracts.errors import HaproofError

log = logging.getLogger(__name__)

COMMIT_TIMEOUT_MS = 5_000  # ControllerRequestProcessor.WAIT_TIMEOUT_OUT


class NotLeaderError(HaproofError):
    """This controller lost (or never had) the leadership while a change was in flight."""


class CommitError(HaproofError):
    """Raft did not commit a change (timeout, queue full): its outcome is unknown."""


class _Replicated(SyncObjConsumer):
    def __init__(self, sm: ControllerStateMachine) -> None:
        super().__init__()
        self._sm = sm

    @replicated
    def apply_events(self, payloads: list[bytes]) -> int:
        for payload in payloads:
            self._sm.apply(decode_event(payload))
        return len(payloads)

    def _serialize(self):
        with self._sm.lock:
            return {"tables": self._sm.tables.to_snapshot()}

    def _deserialize(self, data) -> None:
        self._sm.restore(ReplicaTables.from_snapshot(data["tables"]))


class RaftLog:
    def __init__(self, config: ControllerConfig, sm: ControllerStateMachine) -> None:
        self.config = config
        self.sm = sm
        self._consumer = _Replicated(sm)
        self._obj: SyncObj | None = None
        self._barrier_term: int | None = None

    def open(self) -> int:
        store = Path(self.config.controllerStorePath)
        store.mkdir(parents=True, exist_ok=True)
        timeout_s = self.config.jRaftElectionTimeoutMs / 1000
        conf = SyncObjConf(
            journalFile=str(store / "raft.journal"),
            fullDumpFile=str(store / "raft.dump"),
            raftMinTimeout=timeout_s,
            raftMaxTimeout=timeout_s * 2,
            appendEntriesPeriod=self.config.append_period_ms / 1000,
            # a leader that heard from no majority for this long steps down (PySyncObj's
            # default is 30 s): it stops vouching for master leases (docs/controller.md)
            leaderFallbackTimeout=self.config.leader_fallback_ms / 1000,
            commandsWaitLeader=False,
            dynamicMembershipChange=False,
        )
        me = self.config.jRaftServerId
        others = [p for p in self.config.raft_peers if p != me]
        self._obj = SyncObj(me, others, conf, consumers=[self._consumer])
        return 0

    def _term(self) -> int:
        return int(self._obj.getStatus()["raft_term"]) if self._obj else -1

    def is_leader(self) -> bool:
        return self._obj is not None and self._obj._isLeader()

    def leader_addr(self) -> str | None:
        leader = self._obj._getLeader() if self._obj else None
        return self.config.rpc_addr_of(getattr(leader, "address", None)) if leader else None

    async def barrier(self) -> bool:
        """Once per term: commit an empty batch, so every earlier event is applied here; True
        when this call did (this controller leads in a new term)."""
        term = self._term()
        if self._barrier_term == term:
            return False
        await self._propose([])
        self._barrier_term = term
        return True

    async def append(self, events: list[Event]) -> None:
        await self.barrier()
        await self._propose([encode_event(e) for e in events])

    async def _propose(self, payloads: list[bytes]) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def done(result, error) -> None:  # on PySyncObj's thread
            loop.call_soon_threadsafe(_settle, fut, result, error)

        self._consumer.apply_events(payloads, callback=done)
        try:
            async with asyncio.timeout(COMMIT_TIMEOUT_MS / 1000):
                await fut
        except TimeoutError as exc:
            raise CommitError(f"raft: not committed within {COMMIT_TIMEOUT_MS} ms") from exc

    def close(self) -> None:
        if self._obj is not None:
            self._obj.destroy()
            self._obj = None


def _settle(fut: asyncio.Future, result, error) -> None:
    if fut.done():
        return
    if error == FAIL_REASON.SUCCESS:
        fut.set_result(result)
    elif error in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER, FAIL_REASON.LEADER_CHANGED):
        fut.set_exception(NotLeaderError(f"raft: {FAIL_REASON_NAMES.get(error, error)}"))
    else:
        fut.set_exception(
            CommitError(f"raft: not committed: {FAIL_REASON_NAMES.get(error, error)}")
        )


FAIL_REASON_NAMES = {v: k for k, v in vars(FAIL_REASON).items() if k.isupper()}
