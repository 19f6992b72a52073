"""Running an async test body: ``@async_test`` on an ``async def test_...`` runs it with
``asyncio.run`` (pytest still sees the test's own fixtures), instead of each test wrapping an
inner ``async def main()`` in ``asyncio.run(main())`` by hand; ``run_async`` for a body that is
not a whole test."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(main: Awaitable[T] | Callable[[], Awaitable[T]]) -> T:
    """Run ``main`` (a coroutine, or a function returning one) on a fresh event loop."""
    coro = main() if callable(main) else main
    return asyncio.run(coro)  # type: ignore[arg-type]


def async_test(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Make ``async def test_x(fixtures...)`` a test pytest runs: one fresh loop per test."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        return asyncio.run(fn(*args, **kwargs))

    return run
