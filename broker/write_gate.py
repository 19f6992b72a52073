"""Whether this node takes writes now, apart from its role: closed for named reasons (a node in
controller mode before the controller gave it a role; a master whose lease ended). The send
path refuses while any reason holds (SERVICE_NOT_AVAILABLE, so producers retry elsewhere)."""

from __future__ import annotations


class WriteGate:
    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def close(self, key: str, reason: str) -> None:
        self._reasons[key] = reason

    def open(self, key: str) -> None:
        self._reasons.pop(key, None)

    @property
    def refusal(self) -> str | None:
        """Why writes are refused now; None: they are not (by this gate)."""
        return next(iter(self._reasons.values()), None)
