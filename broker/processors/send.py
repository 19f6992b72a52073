"""SEND_MESSAGE (10, long header names) and SEND_MESSAGE_V2 (310, a..m) → the store."""

from __future__ import annotations

import logging
import random

from broker.remoting.codes import ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store import message as msgfmt
from broker.store.results import PutMessageStatus

log = logging.getLogger(__name__)

# SEND_MESSAGE_V2's one-letter header names → SendMessageRequestHeader's names.
V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}

# PutMessageStatus → RocketMQ response code (anything else: SYSTEM_ERROR with a remark).
STATUS_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}

PERM_WRITE = 0x2


def v2_to_v1(req: RemotingCommand) -> dict[str, str]:
    """The V2 header with its long names (unknown letters kept as they are)."""
    return {V2_NAMES.get(k, k): v for k, v in req.ext_fields.items()}


class SendProcessor:
    """Needs ``node`` with ``store``, ``config`` and ``ensure_topic(topic, default, nums)``."""

    def __init__(self, node) -> None:
        self.node = node

    async def send_v1(self, conn, req: RemotingCommand) -> RemotingCommand:
        return await self._send(conn, req, dict(req.ext_fields))

    async def send_v2(self, conn, req: RemotingCommand) -> RemotingCommand:
        return await self._send(conn, req, v2_to_v1(req))

    async def _send(self, conn, req: RemotingCommand, h: dict[str, str]) -> RemotingCommand:
        def need(name: str) -> str:
            value = h.get(name)
            if value is None:
                return req.field(name)  # raises MissingFieldError naming it
            return value

        def need_int(name: str, default: int | None = None) -> int:
            raw = h.get(name)
            if raw is None and default is not None:
                return default
            try:
                return int(need(name))
            except ValueError:
                raise _BadHeader(name, raw) from None

        try:
            topic = need("topic")
            queue_id = need_int("queueId")
            sys_flag = need_int("sysFlag", 0)
            born_ts = need_int("bornTimestamp", 0)
            flag = need_int("flag", 0)
            reconsume = need_int("reconsumeTimes", 0)
            default_nums = need_int("defaultTopicQueueNums", 4)
        except _BadHeader as exc:
            return req.make_response(ResponseCode.MESSAGE_ILLEGAL, remark=str(exc))
        if str(h.get("batch", "false")).lower() == "true":
            return req.make_response(
                ResponseCode.MESSAGE_ILLEGAL, remark="batch messages are not supported"
            )
        tc = self.node.ensure_topic(topic, h.get("defaultTopic"), default_nums)
        if tc is None:
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{topic}] not exist, apply first please!",
            )
        if not int(tc.get("perm", 6)) & PERM_WRITE:
            return req.make_response(
                ResponseCode.NO_PERMISSION, remark=f"the topic[{topic}] sending is forbidden"
            )
        write_nums = int(tc.get("writeQueueNums", 0))
        if queue_id < 0:
            queue_id = random.randrange(max(write_nums, 1))
        elif queue_id >= max(write_nums, int(tc.get("readQueueNums", 0))):
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"request queueId[{queue_id}] is illegal, topic {topic} has "
                f"{write_nums} write queues",
            )
        host, _, port = conn.peer.rpartition(":")
        msg = msgfmt.Message(
            topic=topic,
            body=req.body,
            queue_id=queue_id,
            flag=flag,
            properties=msgfmt.string_to_properties(h.get("properties") or ""),
            born_timestamp=born_ts,
            born_host=(host or "127.0.0.1", int(port) if port.isdigit() else 0),
            sysflag=sys_flag,
            reconsume_times=reconsume,
        )
        result = await self.node.store.put_message_async(msg)
        status = await self.node.await_replication(result)
        code = STATUS_CODES.get(status)
        if code is None:
            remark = f"{status.value}: {result.remark}".rstrip(": ")
            log.warning("send to %s/%d refused: %s", topic, queue_id, remark)
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=remark)
        return req.make_response(
            code,
            ext_fields={
                "msgId": result.msg_id,
                "queueId": queue_id,
                "queueOffset": result.queue_offset,
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )


class _BadHeader(Exception):
    def __init__(self, name: str, raw) -> None:
        super().__init__(f"send header field {name!r} is not an integer: {raw!r}")
