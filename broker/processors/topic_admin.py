"""DELETE_TOPIC_IN_BROKER (215): an administrator (``mqadmin deleteTopic``) removes a topic from
a broker.

RocketMQ's rules (AdminBrokerProcessor.deleteTopic, DeleteTopicRequestHeader: ``topic``): a
system topic may not be deleted (``The topic[T] is conflict with system topic.``); the topic's
config goes (TopicConfigManager.deleteTopicConfig, a new dataVersion) and the broker registers
with its name servers again. As for updates, a SLAVE refuses: its table is its master's copy
(both checks are topics.py's). Deleting a topic the broker does not hold is a success, as in RocketMQ. The name
servers keep the topic's routes until DELETE_TOPIC_IN_NAMESRV (216, broker/namesrv.py); the
messages and consume queues stay in the store until its files expire, and a send with
auto-create on makes the topic anew.

The guard (guard.py) checks ``topic`` and, under ACL, that the account is an admin one
(broker/acl/permission.py ADMIN_CODES).
"""

from __future__ import annotations

import logging

from broker.processors.names import is_reserved_for_send
from broker.processors.topics import refuse_on_slave, system_topic_remark
from broker.registration import NamesrvRegistration
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.role import BrokerRoleState
from broker.store.topic_configs import TopicConfigManager

log = logging.getLogger(__name__)


class TopicDeleteProcessor:
    """Removes topics from ``topics`` while ``role`` is a master's; registers the change
    through ``registration`` before answering."""

    def __init__(
        self,
        topics: TopicConfigManager,
        role: BrokerRoleState,
        registration: NamesrvRegistration,
    ) -> None:
        self.topics = topics
        self.role = role
        self.registration = registration

    def handlers(self) -> dict[int, object]:
        return {RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic}

    async def delete_topic(self, conn, req: RemotingCommand) -> RemotingCommand:
        refusal = refuse_on_slave(self.role, req)
        if refusal is not None:
            return refusal
        topic = req.field("topic")
        if is_reserved_for_send(topic):  # a system topic, its prefix in any case
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=system_topic_remark(topic))
        if self.topics.delete(topic):
            log.info("topic %s deleted by %s", topic, conn.peer)
            await self.registration.register_all()
        return req.make_response(ResponseCode.SUCCESS)
