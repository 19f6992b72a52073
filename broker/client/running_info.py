"""What a consumer answers GET_CONSUMER_RUNNING_INFO (307, relayed by the broker for ``mqadmin
consumerStatus``): RocketMQ's ConsumerRunningInfo reduced to what haproof's pull consumer has,
as strict JSON: ``properties`` (group, client id, message model, consume type, start time),
``subscriptionSet`` (``topic``, ``subString``), ``mqTable`` as a list of the assigned queues with
their ``commitOffset`` (RocketMQ keys a map by MessageQueue objects, which is not JSON) and an
empty ``statusTable`` (no consume statistics are kept)."""

from __future__ import annotations

import json

from broker.remoting.codes import ResponseCode
from broker.remoting.command import RemotingCommand


def running_info(consumer) -> dict:
    mqs = sorted(consumer.assigned, key=lambda q: (q.topic, q.broker_name, q.queue_id))
    return {
        "properties": {
            "consumerGroup": consumer.group,
            "clientId": consumer.client_id,
            "messageModel": consumer.mode,
            "consumeType": "CONSUME_ACTIVELY",
            "PROP_CONSUMER_START_TIMESTAMP": str(consumer.sub_version),
        },
        "subscriptionSet": [
            {"topic": t, "subString": e} for t, e in sorted(consumer.subscriptions.items())
        ],
        "mqTable": [
            {
                "topic": q.topic,
                "brokerName": q.broker_name,
                "queueId": q.queue_id,
                "commitOffset": consumer.offsets.read(q),
            }
            for q in mqs
        ],
        "statusTable": {},
    }


def running_info_handler(consumer):
    """The client side handler of 307 for ``consumer``."""

    async def handler(conn, req: RemotingCommand) -> RemotingCommand:
        body = json.dumps(running_info(consumer)).encode()
        return req.make_response(ResponseCode.SUCCESS, body=body)

    return handler
