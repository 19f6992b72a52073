"""What the builder takes (:class:`Message`) and what the reader gives (:class:`Record`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.record.ids import message_id
from contracts.record.layout import MAGIC_BLANK, body_crc
from contracts.record.properties import PROPERTY_KEYS, PROPERTY_TAGS


@dataclass(slots=True)
class Message:
    """What a producer hands the store: everything but the store-assigned fields."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    sysflag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)


@dataclass(slots=True)
class Record:
    """One decoded commit log record (or a BLANK filler, ``magic == MAGIC_BLANK``)."""

    physical_offset: int  # where the record was found
    total_size: int
    magic: int
    body_crc: int = 0
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    stored_physical_offset: int = 0  # PHYSICALOFFSET field as written
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("0.0.0.0", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("0.0.0.0", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body: bytes = b""
    topic: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def is_blank(self) -> bool:
        return self.magic == MAGIC_BLANK

    @property
    def end(self) -> int:
        return self.physical_offset + self.total_size

    @property
    def crc_ok(self) -> bool:
        return self.is_blank or body_crc(self.body) == self.body_crc

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def msg_id(self) -> str:
        return message_id(self.store_host[0], self.store_host[1], self.stored_physical_offset)
