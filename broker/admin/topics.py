"""``haproof admin topicList``, ``topicClusterList`` and ``updateTopic``, as mqadmin prints them.

- ``topicList -n N``: every topic of the cluster's masters, one per line. mqadmin asks the name
  server (GET_ALL_TOPIC_LIST_FROM_NAMESERVER 206), which haproof's name server does not serve
  yet; this asks each master for its topic table (GET_ALL_TOPIC_CONFIG 21) instead, so the
  answer is the same for a live cluster.
- ``topicClusterList -n N -t T``: the clusters that hold topic T (its route, 105, and the
  cluster table, 106), one per line.
- ``updateTopic (-b A | -c CLUSTER -n N) -t T [-r 8] [-w 8] [-p 6]``: create or update topic T
  on the broker A or on every master of the cluster (UPDATE_AND_CREATE_TOPIC 17); mqadmin's
  ``create topic to ADDR success.`` then the TopicConfig.
- ``deleteTopic -n N -c CLUSTER -t T``: as mqadmin's DeleteTopicSubCommand, the topic goes from
  every master of the cluster first (DELETE_TOPIC_IN_BROKER 215; each re-registers without it),
  then from the routes of every name server of ``-n`` (DELETE_TOPIC_IN_NAMESRV 216 with the
  cluster's name); ``delete topic [T] from cluster [C] success.`` and ``delete topic [T] from
  NameServer success.``. A master or name server that refuses is named on stderr (exit 1); the
  name servers are not asked when a master refused, so a route never outlives nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.cluster import topic_route
from broker.admin.common import (
    AdminError,
    UsageError,
    addrs,
    cluster_info,
    error_of,
    invoke_all,
    need_targets,
    report_errors,
)
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand

PERMS = {2: "W", 4: "R", 6: "RW"}  # RocketMQ's PermName: PERM_READ 4, PERM_WRITE 2


def masters(info: dict, cluster: str | None = None) -> list[tuple[str, str]]:
    """(brokerName, master address) of every group (of ``cluster`` when given)."""
    names = None
    if cluster is not None:
        table = info.get("clusterAddrTable") or {}
        if cluster not in table:
            known = ", ".join(sorted(table)) or "none"
            raise UsageError(f"the name servers know no cluster {cluster!r} (clusters: {known})")
        names = set(table[cluster])
    out = []
    for name, data in sorted((info.get("brokerAddrTable") or {}).items()):
        ids = data.get("brokerAddrs") or {}
        if (names is None or name in names) and "0" in ids:
            out.append((name, ids["0"]))
    return out


async def topic_list(namesrv_addrs: list[str]) -> tuple[list[str], list[dict]]:
    """The topics of every master, and ``{brokerAddr, error}`` for those that did not answer."""
    targets = [a for _n, a in masters(await cluster_info(namesrv_addrs))]
    topics: set[str] = set()
    errors = []
    answers = await invoke_all(
        targets, lambda: RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)
    )
    for addr, resp in answers:
        err = error_of(resp)
        if err is None:
            try:
                topics.update(json.loads(resp.body)["topicConfigTable"])
                continue
            except (ValueError, KeyError, TypeError) as exc:
                err = f"unreadable topic table: {exc!r}"
        errors.append({"brokerAddr": addr, "error": err})
    return sorted(topics), errors


def run_topic_list(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    topics, errors = asyncio.run(topic_list(addrs(args.namesrv)))
    if args.json:
        print(json.dumps({"topicList": topics, "errors": errors}, indent=2))
    else:
        for t in topics:
            print(t)
    return report_errors("topicList", errors)


async def topic_clusters(namesrv_addrs: list[str], topic: str) -> list[str]:
    route = await topic_route(namesrv_addrs, topic)
    info = await cluster_info(namesrv_addrs)
    of_group = {n: c for c, names in (info.get("clusterAddrTable") or {}).items() for n in names}
    return sorted(
        {
            bd.get("cluster") or of_group.get(bd["brokerName"], "?")
            for bd in route.get("brokerDatas") or []
        }
    )


def run_topic_cluster_list(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    clusters = asyncio.run(topic_clusters(addrs(args.namesrv), args.topic))
    if args.json:
        print(json.dumps({"topic": args.topic, "clusterList": clusters}, indent=2))
    else:
        for c in clusters:
            print(c)
    return 0


def topic_config(args: argparse.Namespace) -> dict:
    for what, n in (
        ("-r/--read-queue-nums", args.read_queue_nums),
        ("-w/--write-queue-nums", args.write_queue_nums),
    ):
        if not 1 <= n <= 1024:
            raise UsageError(f"{what} must be 1-1024, got {n}")
    if args.perm not in PERMS:
        raise UsageError(f"-p/--perm must be 2 (W), 4 (R) or 6 (RW), got {args.perm}")
    return {
        "topicName": args.topic,
        "readQueueNums": args.read_queue_nums,
        "writeQueueNums": args.write_queue_nums,
        "perm": args.perm,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": args.order,
    }


async def update_topic(targets: list[str], tc: dict) -> list[dict]:
    fields = {
        "topic": tc["topicName"],
        "defaultTopic": "TBW102",
        "readQueueNums": tc["readQueueNums"],
        "writeQueueNums": tc["writeQueueNums"],
        "perm": tc["perm"],
        "topicFilterType": tc["topicFilterType"],
        "topicSysFlag": 0,
        "order": "true" if tc["order"] else "false",
    }
    out = []
    answers = await invoke_all(
        targets, lambda: RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
    )
    for addr, resp in answers:
        err = error_of(resp)
        out.append(
            {"brokerAddr": addr, "topicConfig": tc}
            if err is None
            else {"brokerAddr": addr, "error": err}
        )
    return out


async def update_targets(args) -> list[str]:
    if args.broker_addr:
        return addrs(args.broker_addr)
    if not (args.cluster and args.namesrv):
        raise UsageError("give -b/--broker-addr, or -c/--cluster with -n/--namesrv")
    found = [a for _n, a in masters(await cluster_info(addrs(args.namesrv)), args.cluster)]
    if not found:
        raise AdminError(f"cluster {args.cluster!r} has no master the name servers know")
    return found


def run_update_topic(args: argparse.Namespace) -> int:
    tc = topic_config(args)
    rows = asyncio.run(update_topic(asyncio.run(update_targets(args)), tc))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            if "error" not in r:
                print(f"create topic to {r['brokerAddr']} success.")
        if any("error" not in r for r in rows):
            print(
                f"TopicConfig [topicName={tc['topicName']}, readQueueNums={tc['readQueueNums']}, "
                f"writeQueueNums={tc['writeQueueNums']}, perm={PERMS[tc['perm']]}, "
                f"topicFilterType=SINGLE_TAG, topicSysFlag=0, order={str(tc['order']).lower()}]"
            )
    return report_errors("updateTopic", rows)


async def delete_topic(namesrv_addrs: list[str], cluster: str, topic: str) -> dict:
    """``{topic, cluster, brokers, namesrvs}``: one row per master (``{brokerAddr}`` or
    ``{brokerAddr, error}``), then one per name server (``{namesrvAddr}`` or with ``error``)."""
    targets = [a for _n, a in masters(await cluster_info(namesrv_addrs), cluster)]
    if not targets:
        raise AdminError(f"cluster {cluster!r} has no master the name servers know")
    brokers = []
    answers = await invoke_all(
        targets,
        lambda: RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}),
    )
    for addr, resp in answers:
        err = error_of(resp)
        brokers.append({"brokerAddr": addr} if err is None else {"brokerAddr": addr, "error": err})
    namesrvs = []
    if all("error" not in r for r in brokers):
        fields = {"topic": topic, "clusterName": cluster}
        answers = await invoke_all(
            namesrv_addrs,
            lambda: RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, fields),
        )
        for addr, resp in answers:
            err = error_of(resp)
            row = {"namesrvAddr": addr}
            namesrvs.append(row if err is None else {**row, "error": err})
    return {"topic": topic, "cluster": cluster, "brokers": brokers, "namesrvs": namesrvs}


def run_delete_topic(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    doc = asyncio.run(delete_topic(addrs(args.namesrv), args.cluster, args.topic))
    brokers, namesrvs = doc["brokers"], doc["namesrvs"]
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        if all("error" not in r for r in brokers):
            print(f"delete topic [{args.topic}] from cluster [{args.cluster}] success.")
        if namesrvs and all("error" not in r for r in namesrvs):
            print(f"delete topic [{args.topic}] from NameServer success.")
    failed = report_errors("deleteTopic", brokers)
    return report_errors("deleteTopic", namesrvs, who=lambda r: r["namesrvAddr"]) or failed
