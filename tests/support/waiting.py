"""Waiting in tests: one async poll with a deadline (``wait_for``), for conditions a test cannot
drive by ticks (a real socket, another process). Polling is never a synchronisation by sleeping:
it checks a condition until it holds or the deadline passes, then fails naming what it waited
for. A test that owns the clock drives it instead (``driven_clock`` in tests/conftest.py)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(
    predicate: Callable[[], T | Awaitable[T]],
    timeout_ms: float = 10_000,
    *,
    what: str = "condition",
    every_ms: float = 10,
) -> T:
    """Poll ``predicate`` (plain or async) every ``every_ms`` until it returns something truthy,
    which is returned; fail after ``timeout_ms`` of the event loop's clock."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_ms:.0f} ms waiting for {what}")
        await asyncio.sleep(every_ms / 1000)
