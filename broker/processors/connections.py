"""GET_CONSUMER_CONNECTION_LIST (203): ``mqadmin consumerConnection`` asks a broker which
clients of a consumer group are connected (ConsumerManager's members, from their heartbeats).

RocketMQ's AdminBrokerProcessor.getConsumerConnectionList (GetConsumerConnectionListRequestHeader:
``consumerGroup``) answers ConsumerConnection's JSON: ``connectionSet`` (each ``clientId``,
``clientAddr``) and ``subscriptionTable`` (topic -> ``{topic, subString}``); a group with no
member is CONSUMER_NOT_ONLINE (206) ``the consumer group[G] not online``. haproof's heartbeats
keep neither the client's language and version nor the group's consumeType, messageModel and
consumeFromWhere, so those are not in the answer (rather than made up).
The guard checks ``consumerGroup`` (broker/acl/permission.py).
"""

from __future__ import annotations

import json

from broker.processors.admin import ConsumerManager
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError

RELAY_TIMEOUT_MS = 5000


class ConnectionListProcessor:
    """Reads ``consumers``' members."""

    def __init__(self, consumers: ConsumerManager) -> None:
        self.consumers = consumers

    def handlers(self) -> dict[int, object]:
        return {
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.running_info,
        }

    async def running_info(self, conn, req: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (307, ``consumerGroup``, ``clientId``): relayed to that
        client over its own connection (RocketMQ's callConsumer), its answer returned as it
        came; a client not connected here is SYSTEM_ERROR ``The Consumer <G> <ID> not online``."""
        group, client_id = req.field("consumerGroup"), req.field("clientId")
        info = (self.consumers.groups.get(group) or {}).get(client_id)
        if info is None or info.conn.closed.is_set():
            remark = f"The Consumer <{group}> <{client_id[:256]}> not online"
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=remark)
        ask = RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": group, "clientId": client_id}
        )
        try:
            answer = await info.conn.invoke(ask, RELAY_TIMEOUT_MS)
        except RemotingError as exc:
            remark = f"consumer {client_id[:256]} did not answer: {exc}"
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=remark)
        return req.make_response(answer.code, remark=answer.remark, body=answer.body)

    async def producer_connections(self, conn, req: RemotingCommand) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST (204, ``producerGroup``): ProducerConnection's JSON,
        ``connectionSet`` of ``clientId``, ``clientAddr``, ``language``, ``version`` (from the
        producers' heartbeats); a group with none is SYSTEM_ERROR, as RocketMQ's
        ``the producer group not exist``."""
        group = req.field("producerGroup")
        members = dict(self.consumers.producers.get(group) or {})
        if not members:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"the producer group[{group}] not exist"
            )
        connections = [_producer_row(cid, info) for cid, info in sorted(members.items())]
        body = {"connectionSet": connections}
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    async def consumer_connections(self, conn, req: RemotingCommand) -> RemotingCommand:
        group = req.field("consumerGroup")
        members = dict(self.consumers.groups.get(group) or {})
        if not members:
            return req.make_response(
                ResponseCode.CONSUMER_NOT_ONLINE, remark=f"the consumer group[{group}] not online"
            )
        connections, subs = [], {}
        for cid, info in sorted(members.items()):
            connections.append({"clientId": cid, "clientAddr": str(info.conn.peer)})
            for topic, expr in info.subscriptions.items():
                subs[topic] = {"topic": topic, "subString": expr}
        body = {"connectionSet": connections, "subscriptionTable": subs}
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(body).encode())


def _producer_row(client_id: str, info) -> dict:
    return {
        "clientId": client_id,
        "clientAddr": str(info.conn.peer),
        "language": info.language,
        "version": info.version,
    }
