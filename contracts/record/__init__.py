"""The RocketMQ commit log record, the one owner of its on-disk format. Every part of haproof
that reads or writes commit log bytes (the store, HA replication, the archive shipper, the
Spark audit) goes through these modules; builder and reader are apart:

- ``layout``: the field table, magic codes, flags, struct codecs, offsets, lengths, host fields
- ``properties``: the properties string, RocketMQ's property names, the tag hash code
- ``ids``: the offset msgId
- ``model``: ``Message`` (what the builder takes) and ``Record`` (what the reader gives)
- ``builder``: ``encode_message`` / ``EncodedMessage`` / ``encode_blank``
- ``reader``: ``decode_record`` / ``scan_records`` / ``record_to_json``

Import from the module that owns a name; the package itself exports nothing
(``tests/test_architecture.py`` keeps it so).
"""
