"""Read-from-slave advice (RocketMQ's suggestWhichBrokerId in a pull response).

A master tells a consumer to pull from a slave when what it is reading lies far behind the log
end: more than ``accessMessageInMemoryMaxRatio`` % of the machine's physical memory, so it is
likely no longer in the page cache. RocketMQ does this only with ``slaveReadEnable``; the slave
it points to is the group's ``whichBrokerWhenConsumeSlowly`` (1 by default).
"""

from __future__ import annotations

import os

MASTER_ID = 0
SLOW_CONSUMER_BROKER_ID = 1  # SubscriptionGroupConfig.whichBrokerWhenConsumeSlowly default


def total_physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3  # no sysconf: assume 8 GiB rather than never advising


def suggest_which_broker_id(
    config, master_max_offset: int, max_phy_offset_pulled: int, memory_bytes: int
) -> int:
    """The broker id a consumer should pull from next (0: this master, 1: a slave)."""
    if not config.slave_read_enable or max_phy_offset_pulled < 0:
        return MASTER_ID
    behind_bytes = master_max_offset - max_phy_offset_pulled
    in_memory_bytes = memory_bytes * config.access_message_in_memory_max_ratio / 100
    return SLOW_CONSUMER_BROKER_ID if behind_bytes > in_memory_bytes else MASTER_ID
