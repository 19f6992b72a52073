"""Who learns at once that a master's confirmOffset may have moved (what every in-sync slave
acknowledged: ``HAService.status()["confirmOffset"]``). HAService calls ``moved()`` where it
learns it: a slave's ack (classic, and the SyncStateSet keeper's on the same ack), a closed
slave connection, a SyncStateSet change. The offset log's catch-up listens, so a commit waiting
to be visible is answered on the ack that makes it so, not at the next periodic round.

One watch per node, across its role changes (HAService is built afresh at each); a listener
must be cheap and must not raise (it runs inside HAService's read loop)."""

from __future__ import annotations

from collections.abc import Callable


class ConfirmWatch:
    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def moved(self) -> None:
        """The confirmOffset may have moved: tell every listener."""
        for listener in list(self._listeners):
            listener()
