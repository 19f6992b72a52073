"""The base of a node service that only answers requests: nothing runs in the background, so
starting and stopping it does nothing; the node registers its ``handlers()`` with the others'
(``broker/node.py``)."""

from __future__ import annotations

from broker.node_service import Handler

__all__ = ["Handler", "RequestService"]


class RequestService:
    """Subclasses answer request codes (``handlers()``) and may add ``runtime_info()`` keys;
    each takes the collaborators it uses in its own constructor."""

    async def start(self) -> None:
        """Nothing to start: the service only answers requests."""

    async def stop(self) -> None:
        """Nothing to stop."""

    def handlers(self) -> dict[int, Handler]:
        raise NotImplementedError

    def runtime_info(self) -> dict[str, object]:
        return {}
