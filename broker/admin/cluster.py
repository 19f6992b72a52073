"""``haproof admin clusterList``, ``topicRoute``, ``topicStatus`` and ``brokerStatus``.

- ``clusterList --namesrv N``: every broker the name servers know (GET_BROKER_CLUSTER_INFO 106),
  each with its runtime figures (GET_BROKER_RUNTIME_INFO 28): role, version, TPS, max offset.
- ``topicRoute --namesrv N --topic T``: the topic's route (GET_ROUTEINFO_BY_TOPIC 105).
- ``topicStatus --namesrv N --topic T``: per queue min/max offset and last store time from each
  group's master (GET_TOPIC_STATS_INFO 202).
- ``brokerStatus --broker-addr A`` (or ``--namesrv N`` [``--broker-name B``]: every node, or
  the group's): the node's runtime table (GET_BROKER_RUNTIME_INFO 28).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.common import (
    TIMEOUT_MS,
    AdminError,
    addrs,
    cluster_info,
    error_of,
    invoke_all,
    iso_ms,
    need_targets,
    new_client,
    print_blocks,
    print_table,
    report_errors,
)
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError


def _runtime_request() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)


def _kv_table(resp) -> dict[str, str]:
    table = json.loads(resp.body).get("table")
    if not isinstance(table, dict):
        raise ValueError("no KVTable in the answer")
    return {str(k): str(v) for k, v in table.items()}


async def runtime_tables(targets: list[str]) -> list[dict]:
    """``{brokerAddr, table}`` or ``{brokerAddr, error}`` per address."""
    out = []
    for addr, resp in await invoke_all(targets, _runtime_request):
        err = error_of(resp)
        if err is None:
            try:
                out.append({"brokerAddr": addr, "table": _kv_table(resp)})
                continue
            except (ValueError, AttributeError) as exc:
                err = f"unreadable runtime info: {exc}"
        out.append({"brokerAddr": addr, "error": err})
    return out


async def cluster_list(namesrv_addrs: list[str]) -> dict:
    info = await cluster_info(namesrv_addrs)
    brokers = []
    for name, data in sorted((info.get("brokerAddrTable") or {}).items()):
        for bid, addr in sorted((data.get("brokerAddrs") or {}).items(), key=lambda x: int(x[0])):
            brokers.append(
                {
                    "cluster": data.get("cluster"),
                    "brokerName": name,
                    "brokerId": int(bid),
                    "brokerAddr": addr,
                }
            )
    tables = await runtime_tables([b["brokerAddr"] for b in brokers])
    for b, t in zip(brokers, tables, strict=True):
        b.update({k: v for k, v in t.items() if k != "brokerAddr"})
    return {"clusterAddrTable": info.get("clusterAddrTable") or {}, "brokers": brokers}


def _first(triple: str) -> str:
    """The 10-second figure of a "10 s, 1 min, 10 min" TPS triple."""
    return (triple or "-").split()[0]


def _in_set(table: dict[str, str]) -> str:
    """Controller mode: whether the node is in its group's SyncStateSet (and the set); else -."""
    if "inSyncStateSet" not in table:
        return "-"
    member = "yes" if table["inSyncStateSet"] == "True" else "NO"
    return f"{member} [{table.get('controllerSyncStateSet', '')}]"


def run_cluster_list(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    doc = asyncio.run(cluster_list(addrs(args.namesrv)))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        rows = []
        for b in doc["brokers"]:
            t = b.get("table", {})
            rows.append(
                [
                    b["cluster"],
                    b["brokerName"],
                    b["brokerId"],
                    b["brokerAddr"],
                    t.get("brokerRole", "UNREACHABLE"),
                    t.get("brokerVersionDesc", "-"),
                    t.get("epoch", "-"),
                    _first(t.get("putTps", "")),
                    _first(t.get("getTransferedTps", "")),
                    t.get("commitLogMaxOffset", "-"),
                    _in_set(t),
                ]
            )
        headers = [
            "cluster",
            "brokerName",
            "BID",
            "addr",
            "role",
            "version",
            "epoch",
            "inTPS",
            "outTPS",
            "maxOffset",
            "inSyncStateSet",
        ]
        print_table(headers, rows, numeric={2, 6, 7, 8, 9})
    return report_errors("clusterList", doc["brokers"])


async def topic_route(namesrv_addrs: list[str], topic: str) -> dict:
    """The route document from the first name server that answers; AdminError otherwise."""
    client = new_client()
    last: object = None
    try:
        for addr in namesrv_addrs:
            req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            try:
                resp = await client.invoke(addr, req, TIMEOUT_MS)
            except RemotingError as exc:
                last = exc
                continue
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                raise AdminError(f"no route for topic {topic!r}: {resp.remark}")
            if resp.code != ResponseCode.SUCCESS:
                last = resp.remark or f"code {resp.code}"
                continue
            try:
                return json.loads(resp.body)
            except ValueError as exc:
                last = f"unreadable route from {addr}: {exc}"
    finally:
        await client.close()
    raise AdminError(f"no name server answered ({'; '.join(namesrv_addrs)}): {last}")


def route_rows(route: dict) -> list[list]:
    queues = {q["brokerName"]: q for q in route.get("queueDatas") or []}
    rows = []
    for bd in route.get("brokerDatas") or []:
        q = queues.get(bd["brokerName"], {})
        for bid, addr in sorted(bd.get("brokerAddrs", {}).items(), key=lambda x: int(x[0])):
            rows.append(
                [
                    bd.get("cluster", "-"),
                    bd["brokerName"],
                    int(bid),
                    addr,
                    q.get("readQueueNums", "-"),
                    q.get("writeQueueNums", "-"),
                    q.get("perm", "-"),
                ]
            )
    return rows


def run_topic_route(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    route = asyncio.run(topic_route(addrs(args.namesrv), args.topic))
    if args.json:
        print(json.dumps(route, indent=2))
    else:
        headers = ["cluster", "brokerName", "BID", "addr", "readQueues", "writeQueues", "perm"]
        print_table(headers, route_rows(route), numeric={2, 4, 5, 6})
    return 0


async def topic_status(namesrv_addrs: list[str], topic: str) -> list[dict]:
    """One row per queue of each group holding ``topic`` (asked of the group's lowest-id node,
    its master when it has one), or ``{brokerName, brokerAddr, error}``."""
    route = await topic_route(namesrv_addrs, topic)
    targets = []
    for bd in route.get("brokerDatas") or []:
        ids = {int(i): a for i, a in (bd.get("brokerAddrs") or {}).items()}
        if ids:
            targets.append((bd["brokerName"], ids[min(ids)]))
    answers = await invoke_all(
        [a for _n, a in targets],
        lambda: RemotingCommand.request(
            RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic, "strictJson": True}
        ),
    )
    rows: list[dict] = []
    for (name, _a), (addr, resp) in zip(targets, answers, strict=True):
        err = error_of(resp)
        if err is None:
            try:
                rows += [{**r, "brokerAddr": addr} for r in json.loads(resp.body)["offsetTable"]]
                continue
            except (ValueError, KeyError, TypeError) as exc:
                err = f"unreadable topic stats: {exc!r}"
        rows.append({"brokerName": name, "brokerAddr": addr, "error": err})
    return rows


def run_topic_status(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    rows = asyncio.run(topic_status(addrs(args.namesrv), args.topic))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        table = [
            [
                r["brokerName"],
                r["queueId"],
                r["minOffset"],
                r["maxOffset"],
                iso_ms(r["lastUpdateTimestamp"]),
            ]
            for r in rows
            if "error" not in r
        ]
        print_table(
            ["brokerName", "queue", "minOffset", "maxOffset", "lastUpdated"],
            table,
            numeric={1, 2, 3},
        )
    return report_errors("topicStatus", rows, lambda r: f"{r['brokerName']} {r['brokerAddr']}")


async def node_addrs(args) -> list[str]:
    """``--broker-addr`` addresses, then with ``--namesrv`` every node the name servers know
    (only group ``--broker-name``'s when given)."""
    found = addrs(args.broker_addr)
    if args.namesrv:
        info = await cluster_info(addrs(args.namesrv))
        for name, data in sorted((info.get("brokerAddrTable") or {}).items()):
            if args.broker_name in (None, name):
                ids = data.get("brokerAddrs") or {}
                found += [ids[i] for i in sorted(ids, key=int)]
        if args.broker_name and len(found) == len(addrs(args.broker_addr)):
            raise AdminError(f"the name servers know no node of broker group {args.broker_name!r}")
    return list(dict.fromkeys(found))


def run_broker_status(args: argparse.Namespace) -> int:
    need_targets(args)
    docs = asyncio.run(runtime_tables(asyncio.run(node_addrs(args))))
    if args.json:
        print(json.dumps(docs, indent=2))
    else:
        print_blocks(docs, lambda d: print_table(["key", "value"], sorted(d["table"].items())))
    return report_errors("brokerStatus", docs)
