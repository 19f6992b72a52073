"""Stores and archives holding offset commit records (DESIGN.md section 3b) among ordinary
messages, written by the real store, so the audit's witnesses (physical offsets) are known."""

from __future__ import annotations

from pathlib import Path

from broker.config import BrokerConfig
from broker.store.message_store import MessageStore
from contracts.offset_commits.builder import commit_message
from contracts.offset_commits.model import OffsetCommit
from contracts.record.model import Message
from tests.spark_jobs.builder import FILE_SIZE


def commit(group: str, values: dict[int, int], epoch: int = 0, at: int = 1, **reset) -> Message:
    """The record of a commit (or, with ``previous`` and ``by``, of a reset) of topic orders."""
    kind = "reset" if reset else "commit"
    c = OffsetCommit(kind, group, "orders", values, epoch, at, "127.0.0.1:5000", **reset)
    return commit_message(c)


def order(i: int, uniq: str | None = None) -> Message:
    props = {"TAGS": "t"} if uniq is None else {"TAGS": "t", "UNIQ_KEY": uniq}
    return Message("orders", f"order-{i}".encode() * 8, queue_id=i % 2, properties=props)


def write_store(path: Path, messages: list[Message], clock_start: int = 1_000_000) -> list:
    """Append ``messages`` to the store at ``path`` (opened, or created); the put results."""
    cfg = BrokerConfig(
        store_path_root_dir=str(path),
        mapped_file_size_commit_log=FILE_SIZE,
        mapped_file_size_consume_queue=20 * 100,
    )
    store = MessageStore.open(cfg, clock_ms=iter(range(clock_start, 10**8, 10)).__next__)
    try:
        return [store.put_message(m).result() for m in messages]
    finally:
        store.shutdown()
