"""What the node starts and stops: every background part and request service of a node is a
``NodeService`` (``broker/node.py`` starts them in order and stops them in reverse), and what
they add to GET_BROKER_RUNTIME_INFO is gathered by one ``RuntimeInfoTable``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

Handler = Callable[..., Awaitable]


class NodeService(Protocol):
    """A part the node starts (in order) and stops (in reverse); ``handlers()`` are the request
    codes it answers ({} if none), ``runtime_info()`` the keys it adds to the runtime info."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def handlers(self) -> dict[int, Handler]: ...

    def runtime_info(self) -> dict[str, object]: ...


class RuntimeInfoTable:
    """GET_BROKER_RUNTIME_INFO's keys from every service of the node; the node hands in its
    services once they are built (``services``), the readers call ``table()``."""

    def __init__(self, event_loop_name: Callable[[], str] | None = None) -> None:
        self.services: Iterable[NodeService] = ()
        self._event_loop_name = event_loop_name or _event_loop_name

    def table(self) -> dict[str, str]:
        # which asyncio loop serves (eventLoop): uvloop or asyncio
        info: dict[str, str] = {"eventLoop": self._event_loop_name()}
        for service in self.services:
            info.update({k: str(v) for k, v in service.runtime_info().items()})
        return info

    def values(self) -> dict[str, object]:
        """The services' keys with their own types (the metrics read numbers here)."""
        values: dict[str, object] = {}
        for service in self.services:
            values.update(service.runtime_info())
        return values


def _event_loop_name() -> str:
    """Which asyncio loop runs the node: uvloop or asyncio."""
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]
