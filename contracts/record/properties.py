"""A record's properties (``key\\x01value\\x02`` repeated), the names RocketMQ gives them, and
the tag code a consume queue entry stores (``MessageDecoder``, ``MessageConst``)."""

from __future__ import annotations

import functools

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"


def properties_to_string(props: dict[str, str]) -> str:
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def string_to_properties(s: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in s.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        k, sep, v = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            props[k] = v
    return props


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` (over UTF-16 code units) as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)
def tags_hash_code(tags: str | None) -> int:
    """Tag code stored in a consume queue entry: 0 without tags, else ``String.hashCode``."""
    if not tags:
        return 0
    return java_string_hash(tags)
