"""The offset commit writer and applier alone, over fakes of the store and role, on a driven
clock: the commits of one coalescing interval wait for one append; a commit whose handler is
cancelled leaves the others waiting; a failed append or a stopping writer refuses every waiting
commit with a StoreError; an idle catch-up round asks nothing of HA."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.clock import DrivenClock
from broker.offset_log.applier import OffsetLogApplier
from broker.offset_log.writer import OffsetCommitWriter
from broker.store.results import PutMessageStatus
from contracts.errors import StoreError


class _Offsets:
    max_offset_of = None
    log_position = (0, 0)

    def query(self, group, topic, queue_id) -> int:
        return -1


class _Store:
    def __init__(self, status=PutMessageStatus.PUT_OK) -> None:
        self.consumer_offsets = _Offsets()
        self.status = status
        self.appended: list = []

    async def put_message_async(self, msg):
        self.appended.append(msg)
        return SimpleNamespace(status=self.status, wrote_offset=0, queue_offset=0)


def _writer(store: _Store, clock: DrivenClock) -> OffsetCommitWriter:
    role = SimpleNamespace(role=SimpleNamespace(is_master=True), epoch=3)

    async def replicated(result, timeout_ms):
        return result.status

    async def applied(queue_offset, timeout_ms):
        return True

    return OffsetCommitWriter(
        store, role, replicated, applied, timeout_ms=1000, coalesce_ms=20, clock=clock
    )


def test_one_append_answers_every_commit_of_the_interval_and_a_cancel_harms_none() -> None:
    async def main() -> None:
        clock, store = DrivenClock(), _Store()
        writer = _writer(store, clock)
        tasks = [asyncio.create_task(writer.commit("G", "T", q, q + 1, "c:1")) for q in range(8)]
        await clock.settle()
        tasks[3].cancel()  # its client went away
        await clock.advance(20)
        await asyncio.gather(*tasks[:3], *tasks[4:])
        assert len(store.appended) == 1 and writer.records == 1
        assert tasks[3].cancelled()

    asyncio.run(main())


@pytest.mark.parametrize("how", ["refused", "stopped"])
def test_every_waiting_commit_is_refused_when_the_record_is_not_appended(how) -> None:
    async def main() -> None:
        clock = DrivenClock()
        store = _Store(PutMessageStatus.SERVICE_NOT_AVAILABLE if how == "refused" else None)
        writer = _writer(store, clock)
        tasks = [asyncio.create_task(writer.commit("G", "T", q, 1, "c:1")) for q in range(3)]
        await clock.settle()
        if how == "refused":
            await clock.advance(20)
        else:
            await writer.stop()
        for t in tasks:
            with pytest.raises(StoreError):
                await t

    asyncio.run(main())


def test_an_idle_catch_up_asks_nothing_of_ha() -> None:
    asked = []
    store = SimpleNamespace(
        consumer_offsets=_Offsets(),
        get_max_offset_in_queue=lambda topic, q: 5,
        get_min_offset_in_queue=lambda topic, q: 0,
    )
    applier = OffsetLogApplier(store, lambda: asked.append(1))
    applier.next_queue_offset = 5  # everything applied
    assert applier.catch_up() == 0 and asked == []
