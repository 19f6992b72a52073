"""A restarted node answers no QUERY_CONSUMER_OFFSET until it applied the offset records its log
held at start, in any role (``OffsetLogService.not_known``): ``haproof chaos`` found the killed
master, elected again, answering 0 for a queue it had answered 5 for before the kill, in the
moment between taking the master role and opening its read gate (closed at 0 while it was a
slave of nobody). The store here is a stand-in holding only what the service reads: the offsets
queue's end in the log and, under the read gate, what may be applied."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.config import BrokerRole
from broker.ha.confirm_watch import ConfirmWatch
from broker.offset_log.service import OffsetLogService


class _Offsets:
    log_position = (0, 0)  # the checkpoint applied nothing

    def __init__(self) -> None:
        self.reset_listeners: list = []


class _Queries:
    def __init__(self, logged: int) -> None:
        self.logged = logged

    def logged_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.logged


class _Store:
    """``visible``: the offsets queue's end under the read gate (0: the gate closed)."""

    def __init__(self, logged: int) -> None:
        self.queries = _Queries(logged)
        self.consumer_offsets = _Offsets()
        self.visible = 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.visible

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return 0

    def add_dispatch_listener(self, fn) -> None:
        pass

    def remove_dispatch_listener(self, fn) -> None:
        pass


def _service(store: _Store, role: BrokerRole) -> OffsetLogService:
    config = SimpleNamespace(offset_commit_coalesce_ms=20, sync_flush_timeout_ms=1000)
    replication = SimpleNamespace(ha=None, await_replication=None)
    return OffsetLogService(store, SimpleNamespace(role=role), replication, config, ConfirmWatch())


def _started(store: _Store, role: BrokerRole) -> OffsetLogService:
    svc = _service(store, role)

    async def start_stop() -> None:
        await svc.start()
        await svc.stop()

    asyncio.run(start_stop())
    return svc


def test_a_restarted_master_refuses_until_the_records_it_held_are_applied() -> None:
    store = _Store(logged=3)
    svc = _started(store, BrokerRole.SYNC_MASTER)  # elected again, its read gate still at 0
    reason = svc.not_known()
    assert reason is not None and "3 offset record(s)" in reason and "in-sync slaves" in reason
    svc.applier.next_queue_offset = 2  # the gate opened past two of them
    assert "1 offset record(s)" in (svc.not_known() or "")
    svc.applier.next_queue_offset = 3
    assert svc.not_known() is None
    store.queries.logged = 5  # commits after the start are not owed: answered as they apply
    assert svc.not_known() is None


def test_a_slave_of_nobody_refuses_and_a_cut_ends_what_is_owed() -> None:
    store = _Store(logged=4)
    svc = _started(store, BrokerRole.SLAVE)
    assert "waiting for a master" in (svc.not_known() or "")
    store.queries.logged = 1  # the rejoin cut took three never confirmed: one is owed
    svc.applier.next_queue_offset = 1
    assert svc.not_known() is None


def test_a_node_that_held_no_records_at_start_answers_at_once() -> None:
    svc = _started(_Store(logged=0), BrokerRole.SYNC_MASTER)
    assert svc.not_known() is None
