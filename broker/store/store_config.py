"""What the store reads of a node's configuration (RocketMQ's MessageStoreConfig), declared in
the store so that nothing in ``broker/store/`` imports the broker above it.

``BrokerRole`` and ``FlushDiskType`` live here as RocketMQ keeps them in
``org.apache.rocketmq.store.config``; ``broker/config.py`` re-exports them. ``StoreConfig`` is
the structural type of the settings the store reads: ``BrokerConfig`` satisfies it, and so does
anything else (a test's, a tool's) carrying these names.
"""

from __future__ import annotations

import enum
from typing import Protocol


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class StoreConfig(Protocol):
    """The settings a store reads (read-only; a frozen ``BrokerConfig`` is one)."""

    # identity (the role state a bare store starts in, the offsets restore hint)
    @property
    def broker_cluster_name(self) -> str: ...
    @property
    def broker_name(self) -> str: ...
    @property
    def broker_id(self) -> int: ...
    @property
    def broker_role(self) -> BrokerRole: ...
    @property
    def ha_master_address(self) -> str | None: ...
    @property
    def node_name(self) -> str | None: ...
    @property
    def archive_root(self) -> str | None: ...
    @property
    def store_host(self) -> tuple[str, int]: ...

    # files
    @property
    def store_path_root_dir(self) -> str: ...
    @property
    def store_path_commit_log(self) -> str | None: ...
    @property
    def mapped_file_size_commit_log(self) -> int: ...
    @property
    def mapped_file_size_consume_queue(self) -> int: ...
    @property
    def check_crc_on_recover(self) -> bool: ...
    @property
    def enabled_append_prop_crc(self) -> bool: ...
    @property
    def offset_commit_through_log(self) -> bool: ...

    # puts and flushing
    @property
    def max_message_size_bytes(self) -> int: ...
    @property
    def message_delay_level(self) -> str: ...
    @property
    def flush_disk_type(self) -> FlushDiskType: ...
    @property
    def sync_flush_timeout_ms(self) -> int: ...
    @property
    def flush_interval_commit_log_ms(self) -> int: ...
    @property
    def flush_commit_log_least_pages(self) -> int: ...
    @property
    def flush_commit_log_thorough_interval_ms(self) -> int: ...
    @property
    def flush_interval_consume_queue_ms(self) -> int: ...
