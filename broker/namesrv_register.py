"""What a broker's REGISTER_BROKER request carries, decoded and checked before the name server
takes any of it: the body (RocketMQ's JSON, or its zlib-compressed binary form) and every name
and number in it."""

from __future__ import annotations

import re
import struct
import zlib

from broker.processors.names import topic_problem
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError
from contracts.fastjson import loads_fastjson


def decode_register_body(req: RemotingCommand) -> dict:
    if not req.body:
        return {}
    body = req.body
    if req.opt_field("compressed", "false").lower() == "true":
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise RemotingError(
                f"REGISTER_BROKER from {req.opt_field('brokerAddr')}: "
                f"compressed body does not inflate: {exc}"
            ) from exc
    if req.opt_field("compressed", "false").lower() == "true" and not body.lstrip().startswith(
        b"{"
    ):
        return _decode_java_compressed(body, req.opt_field("brokerAddr"))
    try:
        doc = loads_fastjson(body)
    except ValueError as exc:
        raise RemotingError(
            f"REGISTER_BROKER from {req.opt_field('brokerAddr')}: "
            f"body is not RegisterBrokerBody JSON: {exc}"
        ) from exc
    if not isinstance(doc, dict):
        raise RemotingError("REGISTER_BROKER: body is not a JSON object")
    return doc


_I32 = struct.Struct(">i")  # length / count prefix in the compressed RegisterBrokerBody


def _decode_java_compressed(data: bytes, broker_addr: str | None) -> dict:
    """RocketMQ's compressed RegisterBrokerBody, after inflating: [i32 len][DataVersion JSON]
    [i32 n] n x ([i32 len]["topicName read write perm filterType"]) [i32 len][filter list JSON]
    (5.x may append queue mappings: ignored)."""
    where = f"REGISTER_BROKER from {broker_addr}: compressed body"
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(data):
            raise RemotingError(f"{where}: truncated at byte {pos} (wanted {n} bytes)")
        out = data[pos : pos + n]
        pos += n
        return out

    def take_i32() -> int:
        return _I32.unpack(take(4))[0]

    try:
        version = loads_fastjson(take(take_i32()))
        table = {}
        for _ in range(take_i32()):
            fields = take(take_i32()).decode().split(" ")
            if len(fields) != 5:
                raise RemotingError(f"{where}: topic config {' '.join(fields)!r} is not 5 fields")
            name, read, write, perm = fields[0], *map(int, fields[1:4])
            table[name] = {
                "topicName": name,
                "readQueueNums": read,
                "writeQueueNums": write,
                "perm": perm,
            }
        filters = loads_fastjson(take(take_i32()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RemotingError(f"{where}: unreadable at byte {pos}: {exc}") from exc
    return {
        "topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": version},
        "filterServerList": filters,
    }


MAX_REGISTERED_TOPICS = 100_000  # per registration: more is not a broker's topic table
_NAME = re.compile(r"[%|a-zA-Z0-9_.:-]{1,255}")  # broker and cluster names


def registration_problem(req: RemotingCommand, body: dict) -> str | None:
    """Why a REGISTER_BROKER must not touch the route tables: a bad name, address or number."""
    for name in ("brokerName", "clusterName"):
        value = req.field(name)
        if not _NAME.fullmatch(value):
            return f"{name} {value[:60]!r} is not 1-255 characters of [%|a-zA-Z0-9_.:-]"
    addr = req.field("brokerAddr")
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535 or len(addr) > 255:
        return f"brokerAddr {addr[:60]!r} is not host:port"
    if not 0 <= req.int_field("brokerId") < 1 << 31:
        return f"brokerId {req.int_field('brokerId')} is out of range"
    wrapper = body.get("topicConfigSerializeWrapper") or {}
    table = wrapper.get("topicConfigTable") if isinstance(wrapper, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict) or len(table) > MAX_REGISTERED_TOPICS:
        return f"topicConfigTable is not a table of at most {MAX_REGISTERED_TOPICS:,} topics"
    for topic, cfg in table.items():
        if topic_problem(str(topic)) is not None or not isinstance(cfg, dict):
            return f"topicConfigTable: {topic_problem(str(topic)) or f'{topic!r}: not an object'}"
        for key in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"):
            try:
                value = int(cfg.get(key, 0))
            except (TypeError, ValueError):
                return f"topicConfigTable: {topic} {key} {cfg.get(key)!r} is not a number"
            if not 0 <= value < 1 << 16:
                return f"topicConfigTable: {topic} {key} {value} is out of range"
    return None
