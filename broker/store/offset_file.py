"""``consumerOffset.json`` on disk (RocketMQ's document plus ``generation``, ``checksum`` and the
offset log's position): one copy read and verified, the table parsed with every entry checked.
Written only by ``ConsumerOffsetManager`` (``broker/store/consumer_offsets.py``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from contracts.errors import CorruptFileError
from contracts.fastjson import loads_fastjson


@dataclass(frozen=True, slots=True)
class OffsetsCopy:
    path: str
    generation: int  # -1: a document without checksum (RocketMQ's, or written before them)
    verified: bool
    doc: dict[str, Any]


def checksum_of(table: dict[str, dict[str, int]], generation: int) -> str:
    canonical = json.dumps(
        {"generation": generation, "offsetTable": table}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def parse_table(doc: dict[str, Any], source: str) -> dict[str, dict[int, int]]:
    """``offsetTable`` as {topic@group: {queue: offset}}; CorruptFileError naming the entry."""
    table = doc.get("offsetTable", {})
    if not isinstance(table, dict):
        raise CorruptFileError(source, "offsetTable is not an object")
    out: dict[str, dict[int, int]] = {}
    for key, queues in table.items():
        if "@" not in key or not isinstance(queues, dict):
            raise CorruptFileError(source, f"offsetTable entry {key!r} is not topic@group")
        try:
            out[key] = {int(q): int(o) for q, o in queues.items()}
        except (TypeError, ValueError) as exc:
            raise CorruptFileError(source, f"offsetTable[{key!r}]: {exc}") from exc
        if any(o < -1 or q < 0 for q, o in out[key].items()):
            raise CorruptFileError(source, f"offsetTable[{key!r}]: negative queue or offset")
    return out


def log_position(doc: dict[str, Any]) -> tuple[int, int]:
    """``(logOffset, logQueueOffset)`` of a checkpoint (0, 0 when absent or not integers)."""
    pos = (doc.get("logOffset", 0), doc.get("logQueueOffset", 0))
    ok = all(type(v) is int and v >= 0 for v in pos)
    return pos if ok else (0, 0)


def read_copy(path: str) -> OffsetsCopy | None:
    """One copy of the file: None when absent; CorruptFileError when present but unusable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptFileError(path, f"cannot read: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"not UTF-8 at byte {exc.start}") from exc
    if not text.strip():
        raise CorruptFileError(path, "empty")
    doc = loads_fastjson(text, path)
    if not isinstance(doc, dict):
        raise CorruptFileError(path, "expected a JSON object at the top level")
    table = parse_table(doc, path)
    if "checksum" not in doc:
        return OffsetsCopy(path, -1, False, doc)
    generation = doc.get("generation")
    if not isinstance(generation, int) or generation < 0:
        raise CorruptFileError(path, f"generation {generation!r} is not a count")
    strict = {k: {str(q): o for q, o in v.items()} for k, v in table.items()}
    if doc["checksum"] != checksum_of(strict, generation):
        raise CorruptFileError(path, f"checksum mismatch (generation {generation})")
    return OffsetsCopy(path, generation, True, doc)
