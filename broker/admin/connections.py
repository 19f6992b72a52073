"""``haproof admin consumerConnection -g G (-n N | -b A)`` and ``producerConnection -g G``, as
mqadmin prints them.

Each master the name servers know (or each broker of ``-b``) is asked for the group's connected
clients (GET_CONSUMER_CONNECTION_LIST 203); a broker where the group is not online
(CONSUMER_NOT_ONLINE 206) adds none. mqadmin's ``#ClientId #ClientAddr`` rows, then ``Below is
subscription:`` with ``#Topic #SubExpression`` rows. haproof's brokers keep no client language,
version, consume type or message model, so those columns are not shown. No client anywhere is
an error (exit 1), as mqadmin's ``the consumer group[G] not online``.

``producerConnection`` asks the same brokers for a producer group's clients
(GET_PRODUCER_CONNECTION_LIST 204, from the producers' heartbeats) and prints mqadmin's rows:
index, client id, address, language, version.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.common import (
    AdminError,
    addrs,
    cluster_info,
    error_of,
    invoke_all,
    need_targets,
    print_table,
    report_errors,
)
from broker.admin.topics import masters
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand


async def _targets(args: argparse.Namespace) -> list[str]:
    if args.broker_addr:
        return addrs(args.broker_addr)
    return [a for _n, a in masters(await cluster_info(addrs(args.namesrv)))]


async def producer_connections(args: argparse.Namespace) -> dict:
    fields = {"producerGroup": args.group}
    answers = await invoke_all(
        await _targets(args),
        lambda: RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, fields),
    )
    doc: dict = {"producerGroup": args.group, "connectionSet": [], "errors": []}
    for addr, resp in answers:
        if isinstance(resp, RemotingCommand) and "not exist" in (resp.remark or ""):
            continue  # no producer of the group on this broker
        err = error_of(resp)
        if err is None:
            try:
                rows = json.loads(resp.body)["connectionSet"]
                doc["connectionSet"] += [{**c, "brokerAddr": addr} for c in rows]
                continue
            except (ValueError, KeyError, TypeError) as exc:
                err = f"unreadable connection list: {exc!r}"
        doc["errors"].append({"brokerAddr": addr, "error": err})
    return doc


def run_producer_connection(args: argparse.Namespace) -> int:
    need_targets(args)
    doc = asyncio.run(producer_connections(args))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        for i, c in enumerate(doc["connectionSet"], 1):
            print(
                f"{i:04d}  {c['clientId']:<32s} {c['clientAddr']:<22s} {c['language']:<8s} "
                f"{c['version']}"
            )
    failed = report_errors("producerConnection", doc["errors"])
    if not doc["connectionSet"] and not failed:
        raise AdminError(f"the producer group[{args.group}] not exist")
    return failed


async def consumer_connections(args: argparse.Namespace) -> dict:
    targets = await _targets(args)
    fields = {"consumerGroup": args.group}
    answers = await invoke_all(
        targets,
        lambda: RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, fields),
    )
    doc: dict = {"consumerGroup": args.group, "connectionSet": [], "subscriptionTable": {}}
    errors = []
    for addr, resp in answers:
        if isinstance(resp, RemotingCommand) and resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
            continue
        err = error_of(resp)
        if err is None:
            try:
                body = json.loads(resp.body)
                for c in body["connectionSet"]:
                    doc["connectionSet"].append({**c, "brokerAddr": addr})
                doc["subscriptionTable"].update(body["subscriptionTable"])
                continue
            except (ValueError, KeyError, TypeError) as exc:
                err = f"unreadable connection list: {exc!r}"
        errors.append({"brokerAddr": addr, "error": err})
    doc["errors"] = errors
    return doc


def run_consumer_connection(args: argparse.Namespace) -> int:
    need_targets(args)
    doc = asyncio.run(consumer_connections(args))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        rows = [[c["clientId"], c["clientAddr"], c["brokerAddr"]] for c in doc["connectionSet"]]
        print_table(["#ClientId", "#ClientAddr", "#Broker"], rows)
        print("\nBelow is subscription:")
        subs = sorted(doc["subscriptionTable"].values(), key=lambda s: s["topic"])
        print_table(["#Topic", "#SubExpression"], [[s["topic"], s["subString"]] for s in subs])
    failed = report_errors("consumerConnection", doc["errors"])
    if not doc["connectionSet"] and not failed:
        raise AdminError(f"the consumer group[{args.group}] not online")
    return failed


async def consumer_status(args: argparse.Namespace) -> dict:
    """Each connected client of the group (``-i``: one) asked for its running info through
    the broker it is connected to (GET_CONSUMER_RUNNING_INFO 307)."""
    conns = await consumer_connections(args)
    doc: dict = {"consumerGroup": args.group, "clients": [], "errors": conns["errors"]}
    for c in conns["connectionSet"]:
        if args.client_id not in (None, c["clientId"]):
            continue
        fields = {"consumerGroup": args.group, "clientId": c["clientId"]}
        [(addr, resp)] = await invoke_all(
            [c["brokerAddr"]],
            lambda f=fields: RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, f),
        )
        err = error_of(resp)
        if err is None:
            try:
                info = json.loads(resp.body)
                missing = {"properties", "subscriptionSet", "mqTable"} - set(info)
                if missing:
                    raise KeyError(", ".join(sorted(missing)))
                doc["clients"].append({**c, "runningInfo": info})
                continue
            except (ValueError, KeyError, TypeError) as exc:
                err = f"client {c['clientId']}: unreadable running info: {exc!r}"
        doc["errors"].append({"brokerAddr": addr, "error": err})
    subs = {json.dumps(c["runningInfo"]["subscriptionSet"], sort_keys=True) for c in doc["clients"]}
    doc["sameSubscription"] = len(subs) <= 1
    return doc


def _print_status(doc: dict, one_client: bool) -> None:
    for i, c in enumerate(doc["clients"], 1):
        print(f"{i:03d}  {c['clientId']:<40s} {c['clientAddr']:<20s} {c['brokerAddr']}")
    if doc["clients"]:
        print(
            "\nSame subscription in the same group of consumer"
            if doc["sameSubscription"]
            else "\nWARN: Different subscription in the same group of consumer!!!"
        )
    if not one_client:
        return
    for c in doc["clients"]:
        info = c["runningInfo"]
        print("\n#Consumer Properties#")
        for key, value in sorted(info["properties"].items()):
            print(f"{key:<40s}: {value}")
        print("\n#Consumer Subscription#")
        for i, s in enumerate(info["subscriptionSet"], 1):
            print(f"{i:03d} Topic: {s['topic']:<40s} SubExpression: {s['subString']}")
        print("\n#Consumer Offset#")
        print(f"{'#Topic':<32s}  {'#Broker Name':<32s}  {'#QID':<4s}  {'#Consumer Offset':<20s}")
        for q in info["mqTable"]:
            offset = "" if q["commitOffset"] is None else q["commitOffset"]
            print(f"{q['topic']:<32s}  {q['brokerName']:<32s}  {q['queueId']:<4d}  {offset}")


def run_consumer_status(args: argparse.Namespace) -> int:
    need_targets(args)
    doc = asyncio.run(consumer_status(args))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_status(doc, args.client_id is not None)
    failed = report_errors("consumerStatus", doc["errors"])
    if not doc["clients"] and not failed:
        raise AdminError(f"the consumer group[{args.group}] not online")
    return failed
