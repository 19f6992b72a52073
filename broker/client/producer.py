"""asyncio producer: routes from the name server, round-robin queues, SEND_MESSAGE_V2, retry."""

from __future__ import annotations

import enum
import itertools
import logging
import time
from dataclasses import dataclass

from broker.client.routes import (
    PERM_WRITE,
    MessageQueue,
    TopicNotExistError,
    TopicRoute,
    fetch_route,
)
from broker.client.uniq_id import new_uniq_id
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError
from contracts.record.properties import PROPERTY_UNIQ_KEY, properties_to_string

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "TBW102"  # the auto-create template topic
DEFAULT_TOPIC_QUEUE_NUMS = 4
_DEFAULT_NUMS_STR = str(DEFAULT_TOPIC_QUEUE_NUMS)


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


class SendFailedError(RemotingError):
    """Every attempt failed; the last cause is chained."""


@dataclass(frozen=True)
class SendResult:
    status: SendStatus
    msg_id: str  # the client's UNIQ_KEY
    offset_msg_id: str  # store host + physical offset, from the broker
    queue: MessageQueue
    queue_offset: int


class Producer:
    """No I/O here; connections open on first send. Call ``await close()`` when done."""

    def __init__(
        self,
        group: str,
        namesrv_addrs: list[str],
        send_timeout_ms: int = 3000,
        retry_times: int = 2,
        rpc_hook=None,
    ) -> None:
        """``rpc_hook``: signs every request, e.g. ``AclSigner(access_key, secret_key)``."""
        self.group = group
        self.namesrv_addrs = list(namesrv_addrs)
        self.send_timeout_ms = send_timeout_ms
        self.retry_times = retry_times
        self.client = RemotingClient(rpc_hook=rpc_hook)
        self._routes: dict[str, TopicRoute] = {}
        self._rr = itertools.count()

    async def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        if refresh or topic not in self._routes:
            try:
                self._routes[topic] = await fetch_route(self.client, self.namesrv_addrs, topic)
            except TopicNotExistError:
                tmpl = await fetch_route(self.client, self.namesrv_addrs, DEFAULT_TOPIC)
                # As RocketMQ's client: a new topic gets at most defaultTopicQueueNums queues of
                # the default topic's route, the number the broker creates it with.
                queue_datas = [
                    {
                        **qd,
                        "readQueueNums": min(DEFAULT_TOPIC_QUEUE_NUMS, int(qd["readQueueNums"])),
                        "writeQueueNums": min(DEFAULT_TOPIC_QUEUE_NUMS, int(qd["writeQueueNums"])),
                    }
                    for qd in tmpl.queue_datas
                ]
                self._routes[topic] = TopicRoute(topic, queue_datas, tmpl.broker_addrs)
        return self._routes[topic]

    def _pick(self, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        for _ in range(len(queues)):
            mq = queues[next(self._rr) % len(queues)]
            if mq.broker_name != avoid:
                return mq
        return queues[next(self._rr) % len(queues)]

    async def send(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
    ) -> SendResult:
        props = dict(properties or {})
        if tags:
            props["TAGS"] = tags
        if keys:
            props["KEYS"] = keys
        props.setdefault(PROPERTY_UNIQ_KEY, new_uniq_id())
        props.setdefault("WAIT", "true")
        return await self._send_with_retry(topic, "send", body, props, flag)

    async def send_batch(
        self, topic: str, messages: list[tuple[bytes, dict[str, str] | None]]
    ) -> SendResult:
        """Send (body, properties) pairs as one MessageBatch (SEND_BATCH_MESSAGE, 320) to one
        queue; they are stored contiguously. ``msg_id`` / ``offset_msg_id`` are comma-joined
        and ``queue_offset`` is the first message's."""
        from broker.processors.send import encode_batch

        if not messages:
            raise ValueError("send_batch needs at least one message")
        items = []
        for body, properties in messages:
            props = dict(properties or {})
            props.setdefault(PROPERTY_UNIQ_KEY, new_uniq_id())
            props.setdefault("WAIT", "true")
            items.append((0, body, props))
        batch_body = encode_batch(items)
        uniq = ",".join(p[PROPERTY_UNIQ_KEY] for _, _, p in items)
        return await self._send_with_retry(
            topic, "batch send", batch_body, {PROPERTY_UNIQ_KEY: uniq}, 0, batch=True
        )

    async def _send_with_retry(
        self, topic: str, what: str, body: bytes, props: dict, flag: int, batch: bool = False
    ) -> SendResult:
        """Send to a writable queue's master; on failure, retry on another broker group."""
        last: Exception | None = None
        avoid: str | None = None
        for attempt in range(1 + self.retry_times):
            route = await self.route(topic, refresh=attempt > 0)
            queues = route.queues(PERM_WRITE)
            if not queues:
                raise SendFailedError(f"topic {topic!r}: no writable queue in its route")
            mq = self._pick(queues, avoid)
            addr = route.master_addr(mq.broker_name)
            if addr is None:
                avoid, last = mq.broker_name, RemotingError(f"{mq.broker_name}: no master")
                continue
            try:
                return await self._send_once(addr, mq, body, props, flag, batch=batch)
            except RemotingError as exc:
                log.info("%s to %s (%s) failed, attempt %d: %s", what, addr, mq, attempt + 1, exc)
                avoid, last = mq.broker_name, exc
        raise SendFailedError(
            f"topic {topic!r}: {what} failed after {1 + self.retry_times} attempts: {last}"
        ) from last

    async def _send_once(
        self, addr, mq: MessageQueue, body, props, flag, batch: bool = False
    ) -> SendResult:
        header = {  # values as the strings they travel as
            "a": self.group,  # producerGroup
            "b": mq.topic,  # topic
            "c": DEFAULT_TOPIC,  # defaultTopic
            "d": _DEFAULT_NUMS_STR,  # defaultTopicQueueNums
            "e": str(mq.queue_id),  # queueId
            "f": "0",  # sysFlag
            "g": str(time.time_ns() // 1_000_000),  # bornTimestamp
            "h": str(flag),  # flag
            "i": properties_to_string(props),  # properties
            "j": "0",  # reconsumeTimes
            "k": "false",  # unitMode
            "m": "true" if batch else "false",  # batch
        }
        if batch:
            header["i"] = ""  # per-message properties travel inside the batch body
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        req = RemotingCommand.request(code, header, body)
        resp = await self.client.invoke(addr, req, self.send_timeout_ms)
        status = _STATUS.get(resp.code)
        if status is None:
            raise RemotingError(f"{addr}: send refused: code {resp.code} {resp.remark}")
        try:
            return SendResult(
                status,
                props[PROPERTY_UNIQ_KEY],
                resp.field("msgId"),
                MessageQueue(mq.topic, mq.broker_name, resp.int_field("queueId")),
                resp.int_field("queueOffset"),
            )
        except RemotingError as exc:
            raise RemotingError(f"{addr}: malformed send response: {exc}") from exc

    async def close(self) -> None:
        await self.client.close()
