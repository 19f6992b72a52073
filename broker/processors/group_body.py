"""UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's body (RocketMQ's SubscriptionGroupConfig as JSON),
parsed once the same way for the guard (broker/acl/permission.py names the group in it) and the
handler (group_admin.py), so the group the guard checked is the group the handler writes."""

from __future__ import annotations

from typing import Any

from broker.remoting.command import RemotingCommand
from contracts.fastjson import loads_fastjson

# SubscriptionGroupConfig's fields haproof keeps, and the type each must have.
BOOL_FIELDS = (
    "consumeEnable",
    "consumeFromMinEnable",
    "consumeBroadcastEnable",
    "consumeMessageOrderly",
    "notifyConsumerIdsChangedEnable",
)
INT_FIELDS = ("retryQueueNums", "retryMaxTimes", "brokerId", "whichBrokerWhenConsumeSlowly")


def group_body(req: RemotingCommand) -> dict[str, Any] | None:
    """The config in ``req``'s body, only the fields above and ``groupName`` (a string); None
    when the body is not such a document (the handler answers INVALID_PARAMETER)."""
    try:
        doc = loads_fastjson(req.body or b"")
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("groupName"), str):
        return None
    out: dict[str, Any] = {"groupName": doc["groupName"]}
    for key in BOOL_FIELDS:
        if key in doc:
            if not isinstance(doc[key], bool):
                return None
            out[key] = doc[key]
    for key in INT_FIELDS:
        if key in doc:
            if isinstance(doc[key], bool) or not isinstance(doc[key], int):
                return None
            out[key] = doc[key]
    return out
