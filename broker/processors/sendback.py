"""CONSUMER_SEND_MSG_BACK (36): a consumer hands back a message it failed to consume.

RocketMQ 4.x rules (SendMessageProcessor.consumerSendMsgBack): the message, found by its commit
log offset, is stored again into ``%RETRY%{group}`` (created on demand with the subscription
group's retryQueueNums queues, read+write) with reconsumeTimes + 1, RETRY_TOPIC = its first
topic and ORIGIN_MESSAGE_ID = the first message's id, through delay level ``delayLevel`` (0:
the broker picks 3 + reconsumeTimes). Once reconsumeTimes >= maxReconsumeTimes (the header's,
else the group's retryMaxTimes, 16) or when delayLevel < 0 it goes to ``%DLQ%{group}`` instead
(one queue, no delay).
"""

from __future__ import annotations

import logging
import random

from broker.live_config import LiveConfig
from broker.processors.send import SendProcessor
from broker.registration import NamesrvRegistration
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.delay import SCHEDULE_TOPIC
from broker.store.message_store import MessageStore
from broker.store.results import PutMessageStatus
from contracts.record.model import Message
from contracts.record.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_WAIT_STORE_MSG_OK,
)

log = logging.getLogger(__name__)

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
DLQ_NUMS_PER_GROUP = 1
PERM_READ, PERM_WRITE = 0x4, 0x2

_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.SUCCESS,  # stored; RocketMQ answers OK
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.SUCCESS,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SUCCESS,
}


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def find_subscription_group(store: MessageStore, config: LiveConfig, group: str) -> dict | None:
    """RocketMQ SubscriptionGroupManager.findSubscriptionGroupConfig: the group's config,
    created with the defaults when ``autoCreateSubscriptionGroup`` (default true)."""
    auto = str(config.extra.get("autoCreateSubscriptionGroup", "true"))
    return store.subscription_groups.find(group, auto_create=auto.lower() == "true")


def create_topic_in_send_back(store: MessageStore, topic: str, queue_nums: int, perm: int) -> bool:
    """RocketMQ createTopicInSendMessageBackMethod: an existing config wins; True when the
    topic was created now (the caller then registers with the name servers)."""
    return store.topic_config.create_in_send_back(topic, queue_nums, perm)


def foreign_record(rec, origin_topic: str | None, group: str) -> str | None:
    """Why the record at the request's offset may not be sent back (None: it may): it must be a
    message of the origin topic the guard checked, or the group's own retry message of it (a
    message consumed again from ``%RETRY%{group}``). Otherwise any commit log offset would copy
    a message of a topic the caller may not read into a retry topic it may."""
    if origin_topic is None:
        return "send-back needs header field 'originTopic'"
    if rec.topic == origin_topic:
        return None
    props = rec.properties
    retry = retry_topic(group)
    is_retry = rec.topic == retry or (
        rec.topic == SCHEDULE_TOPIC and props.get(PROPERTY_REAL_TOPIC) == retry
    )  # a retry of the group still waiting for its delay level
    if is_retry and props.get(PROPERTY_RETRY_TOPIC) == origin_topic:
        return None
    return (
        f"the message at commit log offset {rec.physical_offset} is not a message of "
        f"topic {origin_topic[:130]!r}"
    )


class SendBackProcessor:
    """Sends a consumed message back to its group's retry topic (or DLQ) through the node's
    SendProcessor ``send``; a retry topic it creates is registered through ``registration``."""

    def __init__(
        self,
        store: MessageStore,
        config: LiveConfig,
        send: SendProcessor,
        registration: NamesrvRegistration,
    ) -> None:
        self.store = store
        self.config = config
        self.send = send
        self.registration = registration

    def handlers(self) -> dict:
        return {RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back}

    def find_group(self, group: str) -> dict | None:
        return find_subscription_group(self.store, self.config, group)

    def create_topic(self, topic: str, queue_nums: int, perm: int) -> None:
        if create_topic_in_send_back(self.store, topic, queue_nums, perm):
            self.registration.topics_changed()

    async def send_back(self, conn, req: RemotingCommand) -> RemotingCommand:
        group = req.field("group")
        offset = req.int_field("offset")
        delay_level = req.int_field("delayLevel")
        max_raw = req.opt_field("maxReconsumeTimes")
        sub = self.find_group(group)
        if sub is None:
            return req.make_response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                remark=f"subscription group not exist, {group}",
            )
        if not sub.get("consumeEnable", True):
            return req.make_response(
                ResponseCode.NO_PERMISSION, remark=f"subscription group no permission, {group}"
            )
        retry_nums = int(sub.get("retryQueueNums", 1))
        if retry_nums <= 0:  # RocketMQ: the group keeps no retries; the message is dropped
            return req.make_response(ResponseCode.SUCCESS)
        try:
            rec = self.store.look_message_by_offset(offset)
        except Exception as exc:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"look message by offset failed, {offset}: {exc}",
            )
        foreign = foreign_record(rec, req.opt_field("originTopic"), group)
        if foreign is not None:
            return req.make_response(ResponseCode.NO_PERMISSION, remark=foreign)
        new_topic = retry_topic(group)
        queue_id = random.randrange(retry_nums)
        self.create_topic(new_topic, retry_nums, PERM_READ | PERM_WRITE)
        props = dict(rec.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, rec.topic)
        props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        try:
            max_times = int(max_raw) if max_raw else int(sub.get("retryMaxTimes", 16))
        except ValueError:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"send-back header field 'maxReconsumeTimes' is not an integer: {max_raw!r}",
            )
        if rec.reconsume_times >= max_times or delay_level < 0:
            new_topic = dlq_topic(group)
            queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
            self.create_topic(new_topic, DLQ_NUMS_PER_GROUP, PERM_READ | PERM_WRITE)
        else:
            if delay_level == 0:
                delay_level = 3 + rec.reconsume_times
            props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
        props[PROPERTY_ORIGIN_MESSAGE_ID] = props.get(PROPERTY_ORIGIN_MESSAGE_ID) or rec.msg_id
        msg = Message(
            topic=new_topic,
            body=rec.body,
            queue_id=queue_id,
            flag=rec.flag,
            properties=props,
            born_timestamp=rec.born_timestamp,
            born_host=rec.born_host,
            sysflag=rec.sysflag,
            reconsume_times=rec.reconsume_times + 1,
        )
        result, status = await self.send.put(msg)
        code = _CODES.get(status)
        if code is None:
            remark = f"{status.value}: {result.remark}".rstrip(": ")
            log.warning("send back of %d for %s refused: %s", offset, group, remark)
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=remark)
        return req.make_response(code)
