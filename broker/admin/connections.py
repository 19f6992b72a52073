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
