"""The RocketMQ commit log record, the one owner of its on-disk format. Every part of haproof
that reads or writes commit log bytes (the store, HA replication, the archive shipper, the
Spark audit) goes through these modules; builder and reader are apart:

- ``layout``: the field table, magic codes, flags, struct codecs, offsets, lengths, host fields
- ``properties``: the properties string, RocketMQ's property names, the tag hash code
- ``ids``: the offset msgId
- ``model``: ``Message`` (what the builder takes) and ``Record`` (what the reader gives)
- ``builder``: ``encode_message`` / ``EncodedMessage`` / ``encode_blank``
- ``reader``: ``decode_record`` / ``scan_records`` / ``record_to_json``

Import from the module that owns a name. This package re-exports them only for code written
against the single module it replaces (branches merged after the split); no logic lives here,
and ``tests/test_architecture.py`` lists who still imports through it.
"""

from contracts.record.builder import (
    EncodedMessage,
    encode_blank,
    encode_message,
)
from contracts.record.ids import (
    message_id,
    message_id_prefix,
    parse_message_id,
)
from contracts.record.layout import (
    END_FILE_MIN_BLANK_LENGTH,
    HEAD,
    I16,
    I32,
    I64,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    MAGICS,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MAX_TOPIC_LENGTH_V2,
    OFFSET_BORNHOST,
    OFFSET_BORNTIMESTAMP,
    OFFSET_PHYSICALOFFSET,
    OFFSET_QUEUEOFFSET,
    OFFSET_SYSFLAG,
    PREFIX,
    QUEUE_AND_PHYSICAL_OFFSET,
    STORE_TAIL,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    U8,
    body_crc,
    decode_host,
    encode_host,
    encoded_length,
    host_len,
)
from contracts.record.model import (
    Message,
    Record,
)
from contracts.record.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
    java_string_hash,
    properties_to_string,
    string_to_properties,
    tags_hash_code,
)
from contracts.record.reader import (
    decode_record,
    record_to_json,
    scan_records,
)

__all__ = [
    "END_FILE_MIN_BLANK_LENGTH",
    "EncodedMessage",
    "HEAD",
    "I16",
    "I32",
    "I64",
    "MAGICS",
    "MAGIC_BLANK",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_PROPERTIES_LENGTH",
    "MAX_TOPIC_LENGTH_V1",
    "MAX_TOPIC_LENGTH_V2",
    "Message",
    "NAME_VALUE_SEPARATOR",
    "OFFSET_BORNHOST",
    "OFFSET_BORNTIMESTAMP",
    "OFFSET_PHYSICALOFFSET",
    "OFFSET_QUEUEOFFSET",
    "OFFSET_SYSFLAG",
    "PREFIX",
    "PROPERTY_DELAY_TIME_LEVEL",
    "PROPERTY_KEYS",
    "PROPERTY_MAX_OFFSET",
    "PROPERTY_MIN_OFFSET",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_REAL_QUEUE_ID",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_RETRY_TOPIC",
    "PROPERTY_SEPARATOR",
    "PROPERTY_TAGS",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT_STORE_MSG_OK",
    "QUEUE_AND_PHYSICAL_OFFSET",
    "Record",
    "STORE_TAIL",
    "SYSFLAG_BORNHOST_V6",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_MULTI_TAGS",
    "SYSFLAG_STOREHOST_V6",
    "SYSFLAG_TRANSACTION_COMMIT",
    "SYSFLAG_TRANSACTION_PREPARED",
    "SYSFLAG_TRANSACTION_ROLLBACK",
    "U8",
    "body_crc",
    "decode_host",
    "decode_record",
    "encode_blank",
    "encode_host",
    "encode_message",
    "encoded_length",
    "host_len",
    "java_string_hash",
    "message_id",
    "message_id_prefix",
    "parse_message_id",
    "properties_to_string",
    "record_to_json",
    "scan_records",
    "string_to_properties",
    "tags_hash_code",
]
