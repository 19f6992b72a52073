from __future__ import annotations

import pytest

from broker.config import BrokerConfig, FlushDiskType
from broker.store.message_store import MessageStore


@pytest.fixture
def make_config(tmp_path):
    def make(**overrides) -> BrokerConfig:
        values = dict(
            store_path_root_dir=str(tmp_path / "store"),
            mapped_file_size_commit_log=4096,
            mapped_file_size_consume_queue=20 * 50,
            flush_disk_type=FlushDiskType.ASYNC_FLUSH,
        )
        values.update(overrides)
        return BrokerConfig(**values)

    return make


@pytest.fixture
def open_store(make_config):
    opened: list[MessageStore] = []

    def open_(**overrides) -> MessageStore:
        store = MessageStore.open(make_config(**overrides))
        opened.append(store)
        return store

    yield open_
    for s in opened:
        if s._lock_fd is not None:
            s.shutdown()
