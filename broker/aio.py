"""The event loop haproof's long-running processes run on.

Broker nodes, the name server and the load generators of the benchmarks run on uvloop (libuv)
by default: on the send path of a broker it takes about a third less CPU per message than the
standard library's selector loop (``haproof bench archive --with-broker`` prints CPU ms per MB
for both sides). ``asyncio`` picks the standard loop, for debugging or where uvloop is missing.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class EventLoop(enum.Enum):
    UVLOOP = "uvloop"
    ASYNCIO = "asyncio"


def run(main: Coroutine[Any, Any, T], loop: EventLoop | str = EventLoop.UVLOOP) -> T:
    """Run ``main`` to completion on a new loop of the given kind, as ``asyncio.run`` does."""
    try:
        kind = EventLoop(loop.lower()) if isinstance(loop, str) else EventLoop(loop)
    except ValueError:
        main.close()
        raise
    if kind is EventLoop.ASYNCIO:
        return asyncio.run(main)
    try:
        import uvloop
    except ImportError as exc:
        main.close()
        raise RuntimeError(
            "the uvloop event loop is not installed (pip install uvloop), "
            "or choose the standard one (eventLoop=asyncio / --event-loop asyncio)"
        ) from exc
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
