"""``haproof admin statsAll -n N [-t TOPIC] [-a]``, as mqadmin prints it.

For each topic of the cluster's masters (one with ``-t``; retry and DLQ topics skipped, as
mqadmin), the masters its route names are asked for its puts (VIEW_BROKER_STATS_DATA 315,
``TOPIC_PUT_NUMS``) and the groups consuming it (QUERY_TOPIC_CONSUME_BY_WHO 300); for each group
its gets (``GROUP_GET_NUMS``, ``topic@group``) and its accumulation (GET_CONSUME_STATS 208, the
sum of its queues' diffs). mqadmin's row per (topic, group): ``#Topic #Consumer Group
#Accumulation #InTPS #OutTPS #InMsg24Hour #OutMsg24Hour`` (TPS over the last minute, counts over
the last day, the broker's windows: broker/processors/stats_windows.py); a topic nobody
consumes is one row with ``NO_CONSUMER``. ``-a``: only topics with traffic in the last day.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.cluster import topic_route
from broker.admin.common import addrs, error_of, invoke_all, need_targets, report_errors
from broker.admin.offsets import consumer_progress
from broker.admin.topics import topic_list
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand


def day_sum(doc: dict) -> int:
    """mqadmin's compute24HourSum: the day's sum, else the hour's, else the minute's."""
    for window in ("statsDay", "statsHour", "statsMinute"):
        if doc[window]["sum"]:
            return int(doc[window]["sum"])
    return 0


async def _stats(masters: list[str], name: str, key: str, errors: list) -> tuple[float, int]:
    """(TPS over the last minute, count over the last day) summed over ``masters``."""
    fields = {"statsName": name, "statsKey": key}
    tps, count = 0.0, 0
    answers = await invoke_all(
        masters, lambda: RemotingCommand.request(RequestCode.VIEW_BROKER_STATS_DATA, fields)
    )
    for addr, resp in answers:
        if isinstance(resp, RemotingCommand) and "not exist" in (resp.remark or ""):
            continue  # nothing counted there yet
        err = error_of(resp)
        if err is None:
            try:
                doc = json.loads(resp.body)
                tps, count = tps + float(doc["statsMinute"]["tps"]), count + day_sum(doc)
                continue
            except (ValueError, KeyError, TypeError) as exc:
                err = f"unreadable stats: {exc!r}"
        errors.append({"brokerAddr": addr, "error": err})
    return tps, count


async def _groups(masters: list[str], topic: str, errors: list) -> list[str]:
    fields = {"topic": topic}
    groups: set[str] = set()
    answers = await invoke_all(
        masters, lambda: RemotingCommand.request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, fields)
    )
    for addr, resp in answers:
        err = error_of(resp)
        if err is None:
            try:
                groups.update(str(g) for g in json.loads(resp.body)["groupList"])
                continue
            except (ValueError, KeyError, TypeError) as exc:
                err = f"unreadable group list: {exc!r}"
        errors.append({"brokerAddr": addr, "error": err})
    return sorted(groups)


async def topic_rows(namesrv: list[str], topic: str, errors: list) -> list[dict]:
    route = await topic_route(namesrv, topic)
    masters = [
        bd["brokerAddrs"]["0"]
        for bd in route.get("brokerDatas") or []
        if "0" in (bd.get("brokerAddrs") or {})
    ]
    in_tps, in_day = await _stats(masters, "TOPIC_PUT_NUMS", topic, errors)
    base = {"topic": topic, "inTps": round(in_tps, 2), "inMsg24Hour": in_day}
    groups = await _groups(masters, topic, errors)
    if not groups:
        return [
            {**base, "consumerGroup": None, "accumulation": 0, "outTps": None, "outMsg24Hour": None}
        ]
    rows = []
    for group in groups:
        out_tps, out_day = await _stats(masters, "GROUP_GET_NUMS", f"{topic}@{group}", errors)
        docs = await consumer_progress(masters, group, topic)
        errors += [d for d in docs if "error" in d]
        behind = sum(r["diff"] for d in docs if "error" not in d for r in d["offsetTable"])
        rows.append(
            {
                **base,
                "consumerGroup": group,
                "accumulation": behind,
                "outTps": round(out_tps, 2),
                "outMsg24Hour": out_day,
            }
        )
    return rows


async def stats_all(args: argparse.Namespace) -> dict:
    namesrv = addrs(args.namesrv)
    errors: list[dict] = []
    if args.topic:
        topics = [args.topic]
    else:
        topics, errors = await topic_list(namesrv)
    rows = []
    for topic in sorted(topics):
        if topic.startswith(("%RETRY%", "%DLQ%")):
            continue
        for row in await topic_rows(namesrv, topic, errors):
            if not args.active or row["inMsg24Hour"] or row["outMsg24Hour"]:
                rows.append(row)
    return {"rows": rows, "errors": errors}


def _print(rows: list[dict]) -> None:
    print(
        f"{'#Topic':<64}  {'#Consumer Group':<64} {'#Accumulation':>12} {'#InTPS':>11} "
        f"{'#OutTPS':>11} {'#InMsg24Hour':>14} {'#OutMsg24Hour':>14}"
    )
    for r in rows:
        if r["consumerGroup"] is None:
            print(
                f"{r['topic']:<64}  {'':<64} {0:>12} {r['inTps']:>11.2f} {'':>11} "
                f"{r['inMsg24Hour']:>14} {'NO_CONSUMER':>14}"
            )
        else:
            print(
                f"{r['topic']:<64}  {r['consumerGroup']:<64} {r['accumulation']:>12} "
                f"{r['inTps']:>11.2f} {r['outTps']:>11.2f} {r['inMsg24Hour']:>14} "
                f"{r['outMsg24Hour']:>14}"
            )


def run_stats_all(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    doc = asyncio.run(stats_all(args))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print(doc["rows"])
    return report_errors("statsAll", doc["errors"])
