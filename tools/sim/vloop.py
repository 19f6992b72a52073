"""An asyncio event loop on virtual time, and the process clocks read from it.

``VirtualLoop`` is a selector loop whose ``time()`` is simulated: when nothing is ready it jumps
straight to the next timer (the approach of the ``looptime`` package), so every
``asyncio.sleep``/``asyncio.timeout`` of the real code runs on simulated time. It has no real
I/O at all: its network entry points (``create_connection``/``create_server``, which
``asyncio.open_connection``/``start_server`` call) are the simulated network of
``tools/sim/net.py``.

Tasks are tagged with the simulated node that created them (the ``NODE`` context variable), so
a crash cancels exactly that node's tasks. ``virtual_time(loop)`` substitutes the ``time``
module's clocks (``time``, ``time_ns``, ``monotonic``, ``monotonic_ns``) inside the simulation
process only while a run lasts, since parts of the node still read them directly; wall time
is per node (``wall_skew_s``) so clock jumps stay within the node that took them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import selectors
import time
from collections.abc import Iterator

NODE: contextvars.ContextVar[str] = contextvars.ContextVar("sim_node", default="sim")
WALL_START_S = 1_700_000_000.0
MONO_START_S = 1000.0


class SimStuck(RuntimeError):
    """Every task waits and no timer is due: the simulated world cannot move."""


class _VirtualSelector(selectors.BaseSelector):
    """Registers (the loop's self-pipe) but never waits: a wait is a jump of virtual time."""

    def __init__(self) -> None:
        self._map: dict[int, selectors.SelectorKey] = {}
        self.loop: VirtualLoop | None = None

    def register(self, fileobj, events, data=None):
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._map[fd] = key
        return key

    def unregister(self, fileobj):
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._map.pop(fd)

    def select(self, timeout=None):
        if timeout is None:
            raise SimStuck("every task waits and no timer is due")
        if timeout > 0 and self.loop is not None:
            self.loop.vt += timeout
        return []

    def get_map(self):
        return self._map

    def close(self) -> None:
        self._map.clear()


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, net=None) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self.vt = MONO_START_S
        self.net = net
        self.wall_skew_s: dict[str, float] = {}
        # per node, its live tasks in creation order (a dict: deterministic iteration)
        self.node_tasks: dict[str, dict[asyncio.Task, None]] = {}
        # (not named _task_factory: BaseEventLoop's attribute of that name would shadow it and
        # install no factory at all, so no task was tagged and a crash cancelled nothing)
        self.set_task_factory(self._tag_task)

    def time(self) -> float:
        return self.vt

    def wall(self) -> float:
        return WALL_START_S + (self.vt - MONO_START_S) + self.wall_skew_s.get(NODE.get(), 0.0)

    def _tag_task(self, loop, coro, context=None):
        task = asyncio.Task(coro, loop=loop, context=context)
        node = (context or contextvars.copy_context()).get(NODE, "sim")
        tasks = self.node_tasks.setdefault(node, {})
        tasks[task] = None
        task.add_done_callback(lambda t: tasks.pop(t, None))
        return task

    async def create_connection(self, protocol_factory, host=None, port=None, **kw):
        return await self.net.connect(protocol_factory, host, port)

    async def create_server(self, protocol_factory, host=None, port=None, **kw):
        return self.net.listen(protocol_factory, host, port)


@contextlib.contextmanager
def virtual_time(loop: VirtualLoop) -> Iterator[None]:
    """The ``time`` module's clocks read the loop's virtual time while this lasts."""
    saved = (time.time, time.time_ns, time.monotonic, time.monotonic_ns)
    time.time = loop.wall
    time.time_ns = lambda: int(loop.wall() * 1e9)
    time.monotonic = loop.time
    time.monotonic_ns = lambda: int(loop.vt * 1e9)
    try:
        yield
    finally:
        time.time, time.time_ns, time.monotonic, time.monotonic_ns = saved


class SimClock:
    """A ``broker.clock.Clock`` (DrivenClock-compatible) on the loop's virtual time, for parts
    built with an injected clock."""

    def __init__(self, loop: VirtualLoop) -> None:
        self.loop = loop

    def wall_ms(self) -> int:
        return int(self.loop.wall() * 1000)

    def monotonic_ms(self) -> float:
        return self.loop.vt * 1000

    async def sleep_ms(self, ms: float) -> None:
        await asyncio.sleep(max(0.0, ms) / 1000)
