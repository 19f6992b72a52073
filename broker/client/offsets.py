"""Consumer offset stores (RocketMQ's RemoteBrokerOffsetStore / LocalFileOffsetStore) and the
averaging queue allocation."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable

from broker.client.routes import MessageQueue
from contracts.errors import CorruptFileError


def allocate_averagely(
    queues: list[MessageQueue], client_ids: list[str], me: str
) -> list[MessageQueue]:
    """AllocateMessageQueueAveragely over sorted queues and sorted client ids."""
    mqs, cids = sorted(queues), sorted(client_ids)
    if me not in cids or not mqs:
        return []
    index, n, c = cids.index(me), len(mqs), len(cids)
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and index < mod:
        size = n // c + 1
    else:
        size = n // c
    start = index * size if (mod > 0 and index < mod) else index * size + mod
    count = min(size, n - start)
    return [mqs[(start + i) % n] for i in range(max(count, 0))]


class OffsetTable:
    """In-memory offsets that only increase (unless forced)."""

    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> None:
        old = self.offsets.get(mq)
        if old is None or not increase_only or offset > old:
            self.offsets[mq] = offset

    def read(self, mq: MessageQueue) -> int | None:
        return self.offsets.get(mq)


class RemoteOffsetSchedule:
    """Decides when the periodic UPDATE_CONSUMER_OFFSET is due (clock injected)."""

    def __init__(self, persist_interval_ms: int, clock_ms: Callable[[], int]) -> None:
        self.persist_interval_ms = persist_interval_ms
        self.clock_ms = clock_ms
        self._last_ms = clock_ms()

    def due(self) -> bool:
        now = self.clock_ms()
        if now - self._last_ms >= self.persist_interval_ms:
            self._last_ms = now
            return True
        return False


def _key(mq: MessageQueue) -> str:
    return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"


class LocalFileOffsetStore(OffsetTable):
    """Broadcasting mode: offsets in a local JSON file, written atomically (tmp, fsync, rename)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    @classmethod
    def load(cls, path: str) -> LocalFileOffsetStore:
        store = cls(path)
        if not os.path.exists(path):
            return store
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            for key, offset in doc["offsetTable"].items():
                topic, broker_name, qid = key.rsplit("@", 2)
                store.offsets[MessageQueue(topic, broker_name, int(qid))] = int(offset)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptFileError(path, f"not a consumer offset file: {exc!r}") from exc
        return store

    def persist(self) -> None:
        doc = {"offsetTable": {_key(mq): off for mq, off in sorted(self.offsets.items())}}
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".offsets.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
