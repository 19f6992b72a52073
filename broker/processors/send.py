"""SEND_MESSAGE (10, long header names), SEND_MESSAGE_V2 (310, a..m) and SEND_BATCH_MESSAGE
(320, or V2 with batch=true) → the store. Messages with a DELAY level go to the schedule topic
(broker/store/delay.py)."""

from __future__ import annotations

import asyncio
import logging
import random
import struct

from broker.config_checks import parse_delay_levels
from broker.ha.role_services import RoleServices
from broker.live_config import LiveConfig
from broker.node_parts import TopicAutoCreate
from broker.processors.runtime import BrokerStats
from broker.processors.send_header import SendHeaderError, send_header
from broker.remoting.codes import FLAG_RESPONSE, RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import Eager
from broker.store import delay
from broker.store.message_store import MessageStore
from broker.store.results import PutMessageResult, PutMessageStatus
from broker.write_gate import WriteGate
from contracts.record.builder import encode_message
from contracts.record.model import Message
from contracts.record.properties import properties_to_string, string_to_properties

log = logging.getLogger(__name__)

# PutMessageStatus → RocketMQ response code (anything else: SYSTEM_ERROR with a remark).
STATUS_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}

# A refused put → RocketMQ's code for it (SendMessageProcessor.handlePutMessageResult); the rest
# is SYSTEM_ERROR with the status in the remark.
REFUSAL_CODES = {
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,  # disk full
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
}

PERM_WRITE = 0x2
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"

# One message of a MessageBatch body (RocketMQ MessageDecoder.encodeMessage), big-endian:
BATCH_ITEM_HEAD = struct.Struct(
    ">i"  # TOTALSIZE: bytes of this item, this field included
    "i"  # MAGICCODE (the client writes 0)
    "i"  # BODYCRC (the client writes 0; the broker computes its own)
    "i"  # FLAG
    "i"  # BODY length, then the body bytes
)
BATCH_PROPS_LEN = struct.Struct(">h")  # PROPERTIES length (short), then the properties bytes


class BatchFormatError(ValueError):
    """A MessageBatch body that does not decode; names the item and byte offset."""


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """(flag, body, properties) of every message in a MessageBatch body."""
    out = []
    pos, n = 0, len(body)
    view = memoryview(body)
    while pos < n:
        item = len(out)
        if n - pos < BATCH_ITEM_HEAD.size:
            raise BatchFormatError(
                f"batch item {item} at byte {pos}: {n - pos} bytes left, a header needs "
                f"{BATCH_ITEM_HEAD.size}"
            )
        total, _magic, _crc, flag, body_len = BATCH_ITEM_HEAD.unpack_from(body, pos)
        if total < BATCH_ITEM_HEAD.size + 2 or pos + total > n:
            raise BatchFormatError(
                f"batch item {item} at byte {pos}: TOTALSIZE {total} outside the {n}-byte body"
            )
        at = pos + BATCH_ITEM_HEAD.size
        if body_len < 0 or at + body_len + 2 > pos + total:
            raise BatchFormatError(
                f"batch item {item} at byte {pos}: body length {body_len} overruns TOTALSIZE {total}"
            )
        payload = bytes(view[at : at + body_len])
        at += body_len
        (props_len,) = BATCH_PROPS_LEN.unpack_from(body, at)
        at += 2
        if props_len < 0 or at + props_len != pos + total:
            raise BatchFormatError(
                f"batch item {item} at byte {pos}: properties length {props_len} does not end "
                f"at TOTALSIZE {total}"
            )
        try:
            props = string_to_properties(bytes(view[at : at + props_len]).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BatchFormatError(
                f"batch item {item} at byte {pos}: properties are not UTF-8: {exc}"
            ) from exc
        out.append((flag, payload, props))
        pos += total
    if not out:
        raise BatchFormatError("batch body holds no message")
    return out


def encode_batch(messages: list[tuple[int, bytes, dict[str, str]]]) -> bytes:
    """The client side: (flag, body, properties) → a MessageBatch body."""
    parts = []
    for flag, body, props in messages:
        props_b = properties_to_string(props).encode("utf-8")
        total = BATCH_ITEM_HEAD.size + len(body) + 2 + len(props_b)
        parts.append(BATCH_ITEM_HEAD.pack(total, 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(BATCH_PROPS_LEN.pack(len(props_b)))
        parts.append(props_b)
    return b"".join(parts)


class SendProcessor:
    """Puts into ``store``; a topic it does not hold is created by ``topics`` when allowed;
    counts puts in ``stats`` and waits for the slaves through ``replication`` (the node's
    role services) when given. ``config`` is read at every put (maxMessageSize changes at
    runtime)."""

    def __init__(
        self,
        store: MessageStore,
        config: LiveConfig,
        topics: TopicAutoCreate,
        stats: BrokerStats | None = None,
        replication: RoleServices | None = None,
        gate: WriteGate | None = None,
    ) -> None:
        self.store = store
        self.gate = gate  # closed: refuse every send (controller mode before a role; lease)
        self.config = config
        self.topics = topics
        self.stats = stats
        self.replication = replication
        self.levels_ms = parse_delay_levels(config.message_delay_level)
        self._topics: dict[str, tuple[dict, tuple[int, int, int]]] = {}
        self._created = AutoCreateCap(config.auto_create_topic_max_per_client)

    def handlers(self) -> dict:
        """Sends start eagerly in the read loop (broker/remoting/connection.Eager)."""
        return {
            RequestCode.SEND_MESSAGE: Eager(self.send_v1),
            RequestCode.SEND_MESSAGE_V2: Eager(self.send_v2),
            RequestCode.SEND_BATCH_MESSAGE: Eager(self.send_batch),
        }

    async def _replication(self, result) -> PutMessageStatus:
        replication = self.replication
        if replication is None or replication.ha is None:
            return result.status  # nothing to wait for: skip a coroutine per message
        return await replication.await_replication(result, self.config.sync_flush_timeout_ms)

    def _topic(self, topic: str, default_topic: str | None, default_nums: int, host: str = ""):
        """(perm, writeQueueNums, max(write, read)) of ``topic``, created when allowed; cached
        while the topic's config object stays the one in the table. None: no such topic."""
        tc = self.store.topic_config.get(topic)
        cached = self._topics.get(topic)
        if cached is not None and cached[0] is tc:
            return cached[1]
        created = tc is None
        if created and not self._created.allows(host):
            return None  # this client created its share of topics already
        tc = self.topics.ensure_topic(topic, default_topic, default_nums)
        if tc is None:
            return None
        if created:
            self._created.count(host)
        write_nums = int(tc.get("writeQueueNums", 0))
        info = (
            int(tc.get("perm", 6)),
            write_nums,
            max(write_nums, int(tc.get("readQueueNums", 0))),
        )
        self._topics[topic] = (tc, info)
        return info

    async def send_v1(self, conn, req: RemotingCommand) -> RemotingCommand:
        return await self._send(conn, req)

    async def send_v2(self, conn, req: RemotingCommand) -> RemotingCommand:
        return await self._send(conn, req)

    async def send_batch(self, conn, req: RemotingCommand) -> RemotingCommand:
        return await self._send(conn, req)

    async def _send(self, conn, req: RemotingCommand) -> RemotingCommand:
        """The header as the guard parsed and checked it (send_header.py): nothing else of
        ``req.ext_fields`` is read here."""
        try:
            h = send_header(req)
        except SendHeaderError as exc:
            return req.make_response(exc.response_code, remark=str(exc))
        if self.gate is not None and self.gate.refusal is not None:
            return req.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, remark=self.gate.refusal)
        refusal = None if self.replication is None else self.replication.admit_put()
        if refusal is not None:  # RocketMQ: IN_SYNC_REPLICAS_NOT_ENOUGH answers SYSTEM_ERROR
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=refusal)
        topic, queue_id, batch = h.topic, h.queue_id, h.batch
        sys_flag, born_ts, flag, reconsume = h.sys_flag, h.born_ts, h.flag, h.reconsume
        default_nums = h.default_nums
        born_host = _born_host(conn)
        info = self._topic(topic, h.default_topic, default_nums, born_host[0])
        if info is None:
            capped = "" if self._created.allows(born_host[0]) else self._created.remark
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{topic}] not exist, apply first please!{capped}",
            )
        perm, write_nums, max_nums = info
        if not perm & PERM_WRITE:
            return req.make_response(
                ResponseCode.NO_PERMISSION, remark=f"the topic[{topic}] sending is forbidden"
            )
        if queue_id < 0:
            queue_id = random.randrange(max(write_nums, 1))
        elif queue_id >= max_nums:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"request queueId[{queue_id}] is illegal, topic {topic} has "
                f"{write_nums} write queues",
            )
        props = string_to_properties(h.properties)
        if batch:
            return await self._put_batch(req, topic, queue_id, props, sys_flag, born_ts, born_host)
        msg = Message(
            topic=topic,
            body=req.body,
            queue_id=queue_id,
            flag=flag,
            properties=props,
            born_timestamp=born_ts,
            born_host=born_host,
            sysflag=sys_flag,
            reconsume_times=reconsume,
        )
        result, status = await self.put(msg)
        code = STATUS_CODES.get(status)
        if code is None:
            remark = f"{status.value}: {result.remark}".rstrip(": ")
            if status is not PutMessageStatus.SERVICE_NOT_AVAILABLE:  # logged once by the store
                log.warning("send to %s/%d refused: %s", topic, queue_id, remark)
            refusal = REFUSAL_CODES.get(status, ResponseCode.SYSTEM_ERROR)
            return req.make_response(refusal, remark=remark)
        return RemotingCommand(  # make_response without re-stringifying every field
            code=code,
            version=req.version,
            opaque=req.opaque,
            flag=FLAG_RESPONSE,
            ext_fields={
                "msgId": result.msg_id,
                "queueId": str(queue_id),
                "queueOffset": str(result.queue_offset),
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
            serialize_type=req.serialize_type,
        )

    async def put(self, msg: Message):
        """Store one message (through the schedule topic when it has a DELAY level) and wait for
        replication; returns (PutMessageResult, final status). Used by send and send-back."""
        store = self.store
        # minInSyncReplicas: a send-back is refused here (sends and batches earlier, in _send)
        refusal = None if self.replication is None else self.replication.admit_put()
        if refusal is not None:
            status = PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
            return PutMessageResult(status, remark=refusal), status
        tags_code = None
        if delay.to_schedule(msg, self.levels_ms):
            level = delay.delay_level(msg.properties)
            tags_code = delay.deliver_timestamp(self.levels_ms, level, store.clock_ms())
        if tags_code is None:
            result = await store.put_message_async(msg)
        else:
            result = await store.put_message_async(msg, tags_code=tags_code)
        status = await self._replication(result)
        stats = self.stats
        if stats is not None and result.status is PutMessageStatus.PUT_OK:
            stats.on_put(msg.topic, 1, result.wrote_bytes)
        return result, status

    async def _put_batch(
        self, req, topic, queue_id, header_props, sys_flag, born_ts, born_host
    ) -> RemotingCommand:
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return req.make_response(
                ResponseCode.MESSAGE_ILLEGAL,
                remark=f"batch request does not support retry group topic {topic}",
            )
        try:
            items = decode_batch(req.body)
        except BatchFormatError as exc:
            return req.make_response(ResponseCode.MESSAGE_ILLEGAL, remark=str(exc))
        if delay.delay_level(header_props) > 0 or any(
            delay.delay_level(p) > 0 for _, _, p in items
        ):
            return req.make_response(
                ResponseCode.MESSAGE_ILLEGAL, remark="batch messages cannot have a delay level"
            )
        store = self.store
        host = self.config.store_host
        encoded = []
        for i, (flag, body, props) in enumerate(items):
            merged = {**header_props, **props} if header_props else props
            msg = Message(topic, body, queue_id, flag, merged, born_ts, born_host, sys_flag)
            try:
                enc = encode_message(msg, host, self.config.enabled_append_prop_crc)
            except ValueError as exc:
                return req.make_response(
                    ResponseCode.MESSAGE_ILLEGAL, remark=f"batch message {i}: {exc}"
                )
            if len(enc.data) > self.config.max_message_size_bytes:
                return req.make_response(
                    ResponseCode.MESSAGE_ILLEGAL,
                    remark=f"batch message {i}: {len(enc.data)} bytes exceeds maxMessageSize",
                )
            encoded.append(enc)
        # Appended back to back in one go (no await in between): contiguous in the commit log
        # and in the queue, as RocketMQ's putMessages.
        loop = asyncio.get_running_loop()
        futures = [store.put_encoded(enc, loop) for enc in encoded]
        results = []
        for fut in futures:
            results.append(fut.result() if fut.done() else await fut)
        first_bad = next((r for r in results if r.status is not PutMessageStatus.PUT_OK), None)
        if first_bad is not None and first_bad is results[0]:
            remark = f"{first_bad.status.value}: {first_bad.remark}".rstrip(": ")
            refusal = REFUSAL_CODES.get(first_bad.status, ResponseCode.SYSTEM_ERROR)
            return req.make_response(refusal, remark=remark)
        ok = [r for r in results if r.wrote_offset >= 0]
        status = await self._replication(ok[-1])
        if first_bad is not None and status is PutMessageStatus.PUT_OK:
            status = first_bad.status
        stats = self.stats
        if stats is not None:
            stats.on_put(topic, len(ok), sum(r.wrote_bytes for r in ok))
        code = STATUS_CODES.get(status)
        if code is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=status.value)
        return req.make_response(
            code,
            ext_fields={
                "msgId": ",".join(r.msg_id for r in ok),
                "queueId": queue_id,
                "queueOffset": ok[0].queue_offset,
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )


class AutoCreateCap:
    """How many topics each client address auto-created by sending; at ``limit`` it creates
    no more (existing topics stay writable). The table holds at most MAX_HOSTS addresses."""

    MAX_HOSTS = 4096

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_host: dict[str, int] = {}
        self.remark = f" (this client auto-created autoCreateTopicMaxPerClient={limit} topics)"

    def allows(self, host: str) -> bool:
        return self._by_host.get(host, 0) < self.limit

    def count(self, host: str) -> None:
        if host not in self._by_host and len(self._by_host) >= self.MAX_HOSTS:
            self._by_host.pop(next(iter(self._by_host)))
        self._by_host[host] = self._by_host.get(host, 0) + 1


def _born_host(conn) -> tuple[str, int]:
    cached = conn.attrs.get("born_host")
    if cached is not None:
        return cached
    host, _, port = conn.peer.rpartition(":")
    value = (host or "127.0.0.1", int(port) if port.isdigit() else 0)
    conn.attrs["born_host"] = value
    return value
