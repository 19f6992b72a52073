"""Shared by the ACL and name tests: an in-process broker over real sockets, request builders,
and a fingerprint of everything on disk and in the tables."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

from broker.node import BrokerNode
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from contracts.record.properties import properties_to_string
from tests.support.nodes import node_config
from tests.support.nodes import run_node as support_run_node

config = node_config  # the shared node config (tests/support/nodes.py)
run_node = support_run_node  # start a node on 127.0.0.1, run body(node, client, addr), stop it


def send_v2(topic: str, body: bytes = b"x", queue_id: int = 0) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "PG",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": queue_id,
            "f": 0,
            "g": 1700000000000,
            "h": 0,
            "i": properties_to_string({"WAIT": "true"}),
            "j": 0,
            "k": False,
            "m": False,
        },
        body,
    )


def pull(topic: str, group: str = "CG", qid: int = 0, offset: int = 0) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": qid,
            "queueOffset": offset,
            "maxMsgNums": 32,
            "sysFlag": 0,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
        },
    )


def heartbeat(group: str, topic: str) -> RemotingCommand:
    body = {
        "clientID": "127.0.0.1@1",
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {
                        "topic": topic,
                        "subString": "*",
                        "classFilterMode": False,
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": 1,
                    }
                ],
            }
        ],
    }
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


def requests_naming(topic: str, group: str) -> list[RemotingCommand]:
    """One request of every kind that carries a topic or a group name."""
    return [
        send_v2(topic),
        RemotingCommand.request(
            RequestCode.SEND_MESSAGE,
            {
                "producerGroup": "PG",
                "topic": topic,
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 4,
                "queueId": 0,
                "sysFlag": 0,
                "bornTimestamp": 1700000000000,
                "flag": 0,
                "properties": "",
                "reconsumeTimes": 0,
            },
            b"x",
        ),
        pull(topic, group),
        RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": 0, "commitOffset": 5},
        ),
        RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": 0},
        ),
        RemotingCommand.request(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            {"group": group, "topic": topic, "queueId": 0, "offset": 0},
        ),
        RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
        ),
        RemotingCommand.request(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {"group": group, "offset": 0, "delayLevel": 0, "originTopic": topic},
        ),
        heartbeat(group, topic),
        RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0}),
    ]


def fingerprint(root: Path) -> dict[str, str]:
    """path -> sha256 of every file under ``root`` (the directory tree around the store)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        out[dirpath] = "dir"
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[path] = hashlib.sha256(fh.read()).hexdigest()
    return out


def tables(node: BrokerNode) -> dict:
    store = node.store
    return copy.deepcopy(
        {
            "topics": store.topic_config.table,
            "offsets": store.consumer_offsets.to_json(),
            "groups": store.subscription_groups.table,
            "consumers": {g: sorted(node.consumers.ids(g)) for g in ("CG", "G")},
        }
    )
