"""UPDATE_AND_CREATE_TOPIC (17): an administrator (``mqadmin updateTopic``, or a client's admin
API such as ali-ons' ``createTopic``) creates or replaces a topic's config on a broker.

RocketMQ's rules (AdminBrokerProcessor.updateAndCreateTopic): a SLAVE refuses; the topic name
must be non-blank, at most 127 characters of ``[%|a-zA-Z0-9_-]`` and not a system topic; the
config comes from the header (readQueueNums, writeQueueNums, perm, topicFilterType, topicSysFlag,
order) and replaces any existing one; the broker registers with its name servers before it
answers, so a route lookup right after the answer already sees the topic.

This module owns the checks an administrator's topic change passes (``refuse_on_slave``, also
asked by group_admin.py; ``topic_name_problem``; ``system_topic_remark``): topic_admin.py's
deletion asks them here.
"""

from __future__ import annotations

import logging
import re

from broker.processors.names import SYSTEM_TOPIC_PREFIX, SYSTEM_TOPICS, TOPIC_MAX_LENGTH
from broker.registration import NamesrvRegistration
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState

log = logging.getLogger(__name__)

_TOPIC_CHARS = re.compile(r"^[%|a-zA-Z0-9_-]+$")
FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
SLAVE_REMARK = (
    "Can't modify topic or subscription group from slave broker, "
    "please execute it from master broker."
)


def refuse_on_slave(role: BrokerRoleState, req: RemotingCommand) -> RemotingCommand | None:
    """The refusal of an administrator's change on a SLAVE (its tables are its master's copy);
    None on a master."""
    if role.role.is_master:
        return None
    return req.make_response(ResponseCode.SYSTEM_ERROR, remark=SLAVE_REMARK)


def system_topic_remark(topic: str) -> str:
    return f"The topic[{topic}] is conflict with system topic."


def topic_name_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid topic name for an update (RocketMQ's remarks), or None."""
    if not topic.strip():
        return "The specified topic is blank."
    if not _TOPIC_CHARS.match(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    if topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX):
        return system_topic_remark(topic)
    return None


class TopicAdminProcessor:
    """Writes ``store``'s topic table while ``role`` is a master's; registers the change through
    ``registration`` before answering."""

    def __init__(
        self, store: MessageStore, role: BrokerRoleState, registration: NamesrvRegistration
    ) -> None:
        self.store = store
        self.role = role
        self.registration = registration

    def handlers(self) -> dict[int, object]:
        return {RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create}

    async def update_and_create(self, conn, req: RemotingCommand) -> RemotingCommand:
        refusal = refuse_on_slave(self.role, req)
        if refusal is not None:
            return refusal
        topic = req.field("topic")
        problem = topic_name_problem(topic)
        if problem is not None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=problem)
        filter_type = req.opt_field("topicFilterType") or "SINGLE_TAG"
        if filter_type not in FILTER_TYPES:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"topicFilterType must be one of {', '.join(FILTER_TYPES)}: {filter_type!r}",
            )
        sys_flag = req.opt_field("topicSysFlag")
        tc = {
            "topicName": topic,
            "readQueueNums": req.int_field("readQueueNums"),
            "writeQueueNums": req.int_field("writeQueueNums"),
            "perm": req.int_field("perm"),
            "topicFilterType": filter_type,
            "topicSysFlag": int(req.int_field("topicSysFlag") if sys_flag else 0),
            "order": (req.opt_field("order") or "false").lower() == "true",
        }
        self.store.topic_config.put(topic, tc)
        log.info("topic %s created/updated by %s: %s", topic, conn.peer, tc)
        await self.registration.register_all()
        return req.make_response(ResponseCode.SUCCESS)
