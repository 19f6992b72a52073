"""``delayOffset.json`` (RocketMQ ScheduleMessageService's offsetTable): per delay level, the
offset in ``SCHEDULE_TOPIC_XXXX``'s queue up to which messages were delivered.

The one owner and writer of the file: the schedule service advances a level (``advance``), a
slave copying its master and a master reading its peers before it serves merge forward
(``merge_forward``: a level only ever rises, so a copy never re-delivers what was delivered).
"""

from __future__ import annotations

from typing import Any

from broker.store.config_store import JsonConfigFile, new_data_version
from contracts.errors import CorruptFileError


class DelayOffsetTable:
    """``offsetTable`` delay level -> consumed queue offset, with its dataVersion."""

    def __init__(self, path: str):
        self.file = JsonConfigFile(path)
        self._table: dict[int, int] = {}
        self.data_version = new_data_version()

    @classmethod
    def load(cls, path: str) -> DelayOffsetTable:
        t = cls(path)
        doc = t.file.load() or {}
        try:
            t._table = {int(k): int(v) for k, v in doc.get("offsetTable", {}).items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise CorruptFileError(path, f"offsetTable: {exc}") from exc
        if isinstance(doc.get("dataVersion"), dict):
            t.data_version = doc["dataVersion"]
        return t

    @property
    def table(self) -> dict[int, int]:
        """Level -> offset, a copy (change it through ``advance`` / ``merge_forward``)."""
        return dict(self._table)

    def get(self, level: int, default: int = 0) -> int:
        return self._table.get(level, default)

    def advance(self, level: int, offset: int) -> None:
        """The schedule service delivered ``level`` up to ``offset`` (persisted by its caller's
        cadence, ``persist``)."""
        self._table[level] = offset

    def merge_forward(self, doc: Any) -> int:
        """Another node's ``GET_ALL_DELAY_OFFSET`` document: keep the larger offset per level;
        returns how many levels rose. ValueError names a malformed entry (nothing is changed
        then)."""
        items = doc.get("offsetTable") if isinstance(doc, dict) else None
        if items is None:
            items = {}
        if not isinstance(items, dict):
            raise ValueError("offsetTable is not an object")
        parsed: dict[int, int] = {}
        for level, off in items.items():
            try:
                level_n, off_n = int(level), int(off)
            except (TypeError, ValueError):
                raise ValueError(f"offsetTable entry {level!r}: {off!r} is not a number") from None
            if off_n < 0:
                raise ValueError(f"offsetTable entry {level!r}: negative offset {off_n}")
            parsed[level_n] = off_n
        rose = 0
        for level_n, off_n in parsed.items():
            if off_n > self._table.get(level_n, -1):
                self._table[level_n] = off_n
                rose += 1
        return rose

    def to_json(self) -> dict[str, Any]:
        return {
            "offsetTable": {str(k): v for k, v in self._table.items()},
            "dataVersion": self.data_version,
        }

    def persist(self) -> None:
        self.file.persist(self.to_json())
