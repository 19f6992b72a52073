"""The loop base and the driven clock: rounds by ticks, wake-ups, failures, stop; no wall time."""

from __future__ import annotations

import asyncio
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.clock import SYSTEM_CLOCK, DrivenClock
from broker.loop_service import LoopService


class Counter(LoopService):
    def __init__(self, clock, period_ms=100, fail_on=(), **kw):
        super().__init__("counter", period_ms=period_ms, clock=clock, **kw)
        self.seen: list[float] = []
        self.fail_on = set(fail_on)

    async def run_once(self) -> None:
        self.seen.append(self.clock.monotonic_ms())
        if len(self.seen) in self.fail_on:
            raise OSError(f"round {len(self.seen)} broke")


def test_rounds_follow_driven_ticks_only():
    async def main():
        clock = DrivenClock()
        svc = Counter(clock, period_ms=100)
        svc.start()
        await clock.advance(99)
        assert svc.seen == []
        await clock.advance(1)
        assert svc.seen == [100]
        await clock.advance(350)
        assert svc.seen == [100, 200, 300, 400]
        await svc.stop()
        assert not svc.running

    asyncio.run(main())


def test_first_round_at_once_and_wakeup():
    async def main():
        clock = DrivenClock()
        svc = Counter(clock, period_ms=1000, run_first_round_at_once=True)
        svc.start()
        await clock.settle()
        assert svc.seen == [0]
        await clock.advance(10)
        svc.wakeup()
        await clock.settle()
        assert svc.seen == [0, 10]
        # the period restarts from the woken round
        await clock.advance(999)
        assert svc.seen == [0, 10]
        await clock.advance(1)
        assert svc.seen == [0, 10, 1010]
        await svc.stop()

    asyncio.run(main())


def test_failed_round_is_logged_with_its_cause_and_the_loop_goes_on(caplog):
    async def main():
        clock = DrivenClock()
        svc = Counter(clock, period_ms=10, fail_on={2})
        svc.start()
        await clock.advance(40)
        await svc.stop()
        return svc

    with caplog.at_level(logging.WARNING, logger="broker.loop_service"):
        svc = asyncio.run(main())
    assert len(svc.seen) == 4
    assert svc.failures == 1 and isinstance(svc.last_failure, OSError)
    record = next(r for r in caplog.records if "round failed" in r.getMessage())
    assert "round 2 broke" in record.getMessage() and record.exc_info is not None


def test_stop_cancels_a_round_that_does_not_end():
    class Stuck(LoopService):
        async def run_once(self) -> None:
            await asyncio.Event().wait()

    async def main():
        svc = Stuck(
            "stuck",
            period_ms=1,
            clock=SYSTEM_CLOCK,
            run_first_round_at_once=True,
            stop_timeout_ms=50,
        )
        svc.start()
        await asyncio.sleep(0)
        await svc.stop()
        assert not svc.running

    asyncio.run(main())


def test_start_twice_is_refused():
    async def main():
        svc = Counter(DrivenClock())
        svc.start()
        with pytest.raises(RuntimeError, match="already started"):
            svc.start()
        await svc.stop()

    asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(
    sleeps=st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=12),
    steps=st.lists(st.integers(min_value=0, max_value=200), min_size=1, max_size=12),
    jump=st.integers(min_value=-5_000, max_value=5_000),
)
def test_sleepers_wake_in_deadline_order_never_early(sleeps, steps, jump):
    async def main():
        clock = DrivenClock(wall_start_ms=1_000_000)
        woke: list[tuple[int, float]] = []

        async def sleeper(i: int, ms: int) -> None:
            await clock.sleep_ms(ms)
            woke.append((i, clock.monotonic_ms()))

        tasks = [asyncio.ensure_future(sleeper(i, ms)) for i, ms in enumerate(sleeps)]
        await clock.settle()
        clock.jump_wall(jump)
        for step in steps:
            await clock.advance(step)
        await clock.advance(max(sleeps))
        await asyncio.gather(*tasks)
        return woke, clock

    woke, clock = asyncio.run(main())
    assert sorted(i for i, _ in woke) == list(range(len(sleeps)))
    for i, at in woke:
        assert at >= sleeps[i]  # never early
    deadlines = [(sleeps[i], i) for i, _ in woke]
    assert deadlines == sorted(deadlines)  # deadline order, ties in the order they slept
    assert clock.wall_ms() == 1_000_000 + jump + clock.monotonic_ms()


def test_driven_clock_refuses_to_go_back():
    async def main():
        with pytest.raises(ValueError, match="cannot go back"):
            await DrivenClock().advance(-1)

    asyncio.run(main())
