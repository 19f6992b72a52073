"""``haproof admin updateSubGroup`` and ``deleteSubGroup``, as mqadmin prints them.

- ``updateSubGroup (-b A | -c CLUSTER -n N) -g G [-s B] [-m B] [-d B] [-o B] [-q N] [-r N]
  [-i ID] [-w ID] [-a B]``: create or replace group G's config on the broker A or on every
  master of the cluster (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200, the config as the body).
  As mqadmin's UpdateSubGroupSubCommand, consumeBroadcastEnable and consumeFromMinEnable are
  false unless given, the rest SubscriptionGroupConfig's defaults; ``create subscription group
  to ADDR success.`` per broker, then the config.
- ``deleteSubGroup (-b A | -c CLUSTER -n N) -g G``: remove group G's config
  (DELETE_SUBSCRIPTIONGROUP 207, ``cleanOffset`` false: committed offsets stay); with ``-c``, as
  mqadmin, the group's ``%RETRY%G`` and ``%DLQ%G`` topics are deleted from the cluster too
  (deleteTopic, topics.py). ``delete subscription group [G] from broker [ADDR] success.``
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.common import addrs, error_of, invoke_all, report_errors
from broker.admin.topics import delete_topic, update_targets
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand

_BOOLS = {"true": True, "false": False}


def parse_bool(text: str) -> bool:
    """mqadmin's Boolean.parseBoolean, but strict: ``true`` or ``false``."""
    try:
        return _BOOLS[text.strip().lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}") from None


def group_config(args: argparse.Namespace) -> dict:
    """The SubscriptionGroupConfig sent, as UpdateSubGroupSubCommand builds it."""
    config = {
        "groupName": args.group.strip(),
        "consumeEnable": True,
        "consumeFromMinEnable": False,
        "consumeBroadcastEnable": False,
        "consumeMessageOrderly": False,
        "retryQueueNums": 1,
        "retryMaxTimes": 16,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }
    given = {
        "consumeEnable": args.consume_enable,
        "consumeFromMinEnable": args.consume_from_min_enable,
        "consumeBroadcastEnable": args.consume_broadcast_enable,
        "consumeMessageOrderly": args.consume_message_orderly,
        "retryQueueNums": args.retry_queue_nums,
        "retryMaxTimes": args.retry_max_times,
        "brokerId": args.broker_id,
        "whichBrokerWhenConsumeSlowly": args.which_broker_when_consume_slowly,
        "notifyConsumerIdsChangedEnable": args.notify_consumer_ids_changed,
    }
    config.update({k: v for k, v in given.items() if v is not None})
    return config


def _rows(answers, ok) -> list[dict]:
    out = []
    for addr, resp in answers:
        err = error_of(resp)
        out.append(
            {"brokerAddr": addr, **ok} if err is None else {"brokerAddr": addr, "error": err}
        )
    return out


async def update_sub_group(targets: list[str], config: dict) -> list[dict]:
    body = json.dumps(config).encode()

    def request() -> RemotingCommand:
        req = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
        req.body = body
        return req

    return _rows(await invoke_all(targets, request), {"subscriptionGroupConfig": config})


def run_update_sub_group(args: argparse.Namespace) -> int:
    config = group_config(args)
    rows = asyncio.run(update_sub_group(asyncio.run(update_targets(args)), config))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            if "error" not in r:
                print(f"create subscription group to {r['brokerAddr']} success.")
        if any("error" not in r for r in rows):
            shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in config.items())
            print(f"SubscriptionGroupConfig [{shown}]")
    return report_errors("updateSubGroup", rows)


async def delete_sub_group(targets: list[str], group: str) -> list[dict]:
    fields = {"groupName": group, "cleanOffset": "false"}
    answers = await invoke_all(
        targets, lambda: RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, fields)
    )
    return _rows(answers, {})


def run_delete_sub_group(args: argparse.Namespace) -> int:
    group = args.group.strip()
    rows = asyncio.run(delete_sub_group(asyncio.run(update_targets(args)), group))
    doc: dict = {"groupName": group, "brokers": rows, "topics": []}
    if args.cluster and args.namesrv and all("error" not in r for r in rows):
        for topic in (f"%RETRY%{group}", f"%DLQ%{group}"):
            doc["topics"].append(
                asyncio.run(delete_topic(addrs(args.namesrv), args.cluster, topic))
            )
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        where = f" in cluster [{args.cluster}]" if args.cluster else ""
        for r in rows:
            if "error" not in r:
                print(
                    f"delete subscription group [{group}] from broker [{r['brokerAddr']}]{where} success."
                )
        for t in doc["topics"]:
            if all("error" not in r for r in t["brokers"] + t["namesrvs"]):
                print(f"delete topic [{t['topic']}] from cluster [{t['cluster']}] success.")
    failed = report_errors("deleteSubGroup", rows)
    for t in doc["topics"]:
        failed = report_errors("deleteSubGroup", t["brokers"]) or failed
        failed = (
            report_errors("deleteSubGroup", t["namesrvs"], who=lambda r: r["namesrvAddr"]) or failed
        )
    return failed
