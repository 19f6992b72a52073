"""``haproof admin consumerProgress``, ``resetOffset`` and ``resetOffsetByTime``.

- ``consumerProgress --group G [--topic T]`` (``--namesrv``: every group's master, or its
  lowest-id node when it has none; or ``--broker-addr``): per queue broker offset, consumer
  offset and diff, as mqadmin consumerProgress (GET_CONSUME_STATS 208).
- ``resetOffset --group G --topic T --queue Q --offset O`` (``--namesrv`` [``--broker-name``]:
  the master first, then the group's other nodes, so a slave's forward-only copy cannot undo
  it; or ``--broker-addr`` in the order given): the one recorded way to move a committed offset
  backwards (INVOKE_BROKER_TO_RESET_OFFSET 222, broker/processors/ha_admin.py). Stop the
  group's consumers first.
- ``resetOffsetByTime --group G --topic T --timestamp WHEN [--queue Q]``: in each broker group
  holding the topic (``--broker-name``: only that one; ``--queue`` needs one group), the
  first node (the master) picks, per queue, the first message stored at or after WHEN (222 by
  time) and records the moves; the group's other nodes then get those exact offsets, so a
  lagging slave cannot pick different ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.common import (
    AdminError,
    UsageError,
    addrs,
    cluster_table,
    error_of,
    invoke_all,
    iso_ms,
    new_client,
    parse_time_ms,
    print_table,
    report_errors,
)
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError


async def consumer_progress(broker_addrs: list[str], group: str, topic: str | None = None):
    """One document per broker: GET_CONSUME_STATS's answer, or ``{brokerAddr, error}``."""
    fields = {"consumerGroup": group, **({"topic": topic} if topic else {})}
    out = []
    for addr, resp in await invoke_all(
        broker_addrs, lambda: RemotingCommand.request(RequestCode.GET_CONSUME_STATS, fields)
    ):
        err = error_of(resp)
        if err is None:
            try:
                doc = json.loads(resp.body)
                if isinstance(doc, dict) and isinstance(doc.get("offsetTable"), list):
                    out.append(doc)
                    continue
                err = "unreadable consume stats: no offsetTable list"
            except ValueError as exc:
                err = f"unreadable consume stats: {exc}"
        out.append({"brokerAddr": addr, "error": err})
    return out


def print_consumer_progress(group: str, docs: list[dict]) -> None:
    print(f"consumer group {group}")
    rows, total = [], 0
    for d in docs:
        if "error" in d:
            print(f"{d['brokerAddr']}: {d['error']}")
            continue
        for r in d["offsetTable"]:
            total += r["diff"]
            rows.append(
                [
                    r["topic"],
                    r["brokerName"],
                    r["queueId"],
                    r["brokerOffset"],
                    r["consumerOffset"],
                    r["diff"],
                ]
            )
    headers = ["topic", "broker", "queue", "brokerOffset", "consumerOffset", "diff"]
    print_table(headers, rows, numeric={2, 3, 4, 5})
    print(f"diff total: {total}")


async def _progress_addrs(args) -> list[str]:
    found = addrs(args.broker_addr)
    if args.namesrv:
        table = await cluster_table(addrs(args.namesrv))
        for _name, ids in sorted(table.items()):
            if ids:
                found.append(ids[min(ids)])
    return list(dict.fromkeys(found))


def run_consumer_progress(args: argparse.Namespace) -> int:
    if not args.namesrv and not args.broker_addr:
        raise UsageError("give --namesrv or --broker-addr")
    targets = asyncio.run(_progress_addrs(args))
    docs = asyncio.run(consumer_progress(targets, args.group, args.topic))
    if args.json:
        print(json.dumps(docs, indent=2))
    else:
        print_consumer_progress(args.group, docs)
    unreachable = [d for d in docs if str(d.get("error", "")).startswith("unreachable")]
    if unreachable or all("error" in d for d in docs):
        return report_errors("consumerProgress", docs) or 1
    return 0


async def reset_offset(
    broker_addrs: list[str], group: str, topic: str, queue_id: int, offset: int
) -> list[dict]:
    """Reset on each address in order; ``{brokerAddr, previousOffset}`` or ``{.., error}``."""
    fields = {
        "group": group,
        "topic": topic,
        "queueId": queue_id,
        "offset": offset,
        "timestamp": -1,
        "isForce": True,
    }
    out = []
    for addr, resp in await invoke_all(
        broker_addrs,
        lambda: RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields),
    ):
        err = error_of(resp)
        if err:
            out.append({"brokerAddr": addr, "error": err})
        else:
            prev = int(resp.ext_fields.get("previousOffset", -1))
            out.append({"brokerAddr": addr, "previousOffset": prev, "offset": offset})
    return out


async def group_targets(args, all_groups: bool = False) -> list[list[str]]:
    """Per broker group to reset: its nodes, master (brokerId 0) first. ``--broker-addr``
    alone is one group in the order given; with ``--namesrv`` the group is ``--broker-name``,
    else the one holding the topic, else (``all_groups``) every group holding it."""
    found = addrs(args.broker_addr)
    if not args.namesrv:
        return [found]
    from broker.client.routes import fetch_route

    client = new_client()
    try:
        names = [args.broker_name] if args.broker_name else None
        if names is None:
            try:
                route = await fetch_route(client, addrs(args.namesrv), args.topic)
            except RemotingError as exc:
                raise AdminError(f"no route for topic {args.topic!r}: {exc}") from exc
            names = sorted(route.broker_addrs)
            if len(names) != 1 and (not all_groups or found):
                raise AdminError(
                    f"topic {args.topic!r} is on broker groups {names}: give --broker-name"
                )
        table = await cluster_table(addrs(args.namesrv), client)
    finally:
        await client.close()
    groups = []
    for name in names:
        ids = table.get(name)
        if not ids:
            raise AdminError(f"the name servers know no node of broker group {name!r}")
        groups.append(list(dict.fromkeys(found + [ids[i] for i in sorted(ids)])))
    return groups


async def reset_targets(args) -> list[str]:
    """The one group's nodes, master (brokerId 0) first."""
    return (await group_targets(args))[0]


def _report_resets(verb: str, rows: list[dict], as_json: bool, args) -> int:
    if as_json:
        print(json.dumps(rows))
    else:
        for r in rows:
            if "error" in r:
                print(f"{r['brokerAddr']}: FAILED: {r['error']}")
            else:
                kept = " (unchanged)" if r.get("changed") is False else ""
                print(
                    f"{r['brokerAddr']}: {args.group} {args.topic}/{r.get('queueId', args.queue)} "
                    f"{r['previousOffset']} -> {r['offset']}{kept}"
                )
    return report_errors(verb, rows) or (0 if rows else 1)


def run_reset_offset(args: argparse.Namespace) -> int:
    if not args.namesrv and not args.broker_addr:
        raise UsageError("give --namesrv or --broker-addr")
    if args.queue < 0 or args.offset < 0:
        raise UsageError(f"--queue ({args.queue}) and --offset ({args.offset}) must be >= 0")
    targets = asyncio.run(reset_targets(args))
    rows = asyncio.run(reset_offset(targets, args.group, args.topic, args.queue, args.offset))
    return _report_resets("resetOffset", rows, args.json, args)


async def reset_offset_by_time(
    broker_addrs: list[str],
    group: str,
    topic: str,
    timestamp_ms: int,
    queue_id: int = -1,
    force: bool = True,
) -> list[dict]:
    """The first address picks each queue's offset by time; the others get the offsets it
    changed. One row per (node, queue): ``{brokerAddr, queueId, previousOffset, offset}`` or an error."""
    if not broker_addrs:
        return []
    fields = {
        "group": group,
        "topic": topic,
        "timestamp": timestamp_ms,
        "queueId": queue_id,
        "offset": -1,
        "isForce": force,
        "strictJson": True,
    }
    first, *rest = broker_addrs
    [(addr, resp)] = await invoke_all(
        [first], lambda: RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
    )
    err = error_of(resp)
    if err:
        return [{"brokerAddr": addr, "error": err}]
    try:
        picked = json.loads(resp.body)["offsetTable"]
    except (ValueError, KeyError, TypeError) as exc:
        return [{"brokerAddr": addr, "error": f"unreadable answer: {exc!r}"}]
    rows = [
        {
            "brokerAddr": addr,
            "queueId": p["queueId"],
            "previousOffset": p["previousOffset"],
            "offset": p["offset"],
            "changed": p.get("changed", True),
        }
        for p in picked
    ]
    for p in picked:
        if not p.get("changed", True):
            continue  # the master kept this queue's offset: nothing to carry to the others
        for r in await reset_offset(rest, group, topic, p["queueId"], p["offset"]):
            rows.append({**r, "queueId": p["queueId"]})
    return rows


def run_reset_offset_by_time(args: argparse.Namespace) -> int:
    if not args.namesrv and not args.broker_addr:
        raise UsageError("give --namesrv or --broker-addr")
    when_ms = parse_time_ms(args.timestamp)
    if args.queue is not None and args.queue < 0:
        raise UsageError(f"--queue ({args.queue}) must be >= 0")
    groups = asyncio.run(group_targets(args, all_groups=args.queue is None))
    queue = -1 if args.queue is None else args.queue
    rows = []
    for targets in groups:  # each group holding the topic, as mqadmin resets them all
        rows += asyncio.run(
            reset_offset_by_time(targets, args.group, args.topic, when_ms, queue, not args.no_force)
        )
    if not args.json:
        print(
            f"reset {args.group} on {args.topic} to the first message stored at or after "
            f"{iso_ms(when_ms)} ({when_ms} ms)"
        )
    return _report_resets("resetOffsetByTime", rows, args.json, args)


async def broker_consume_stats(addr: str) -> dict:
    """Every (group, topic, queue) a broker holds a committed offset for, with its broker offset
    and lag: the consumer offset table's groups (GET_ALL_CONSUMER_OFFSET 43), each asked with
    GET_CONSUME_STATS 208 (RocketMQ's GET_BROKER_CONSUME_STATS 317 answers the same from one
    request; haproof's broker does not serve it yet)."""
    [(_a, resp)] = await invoke_all(
        [addr], lambda: RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET)
    )
    err = error_of(resp)
    if err is not None:
        raise AdminError(f"{addr}: {err}")
    try:
        keys = json.loads(resp.body)["offsetTable"]
    except (ValueError, KeyError, TypeError) as exc:
        raise AdminError(f"{addr}: unreadable consumer offsets: {exc!r}") from exc
    groups = sorted({k.split("@", 1)[1] for k in keys if "@" in k})
    rows: list[dict] = []
    for group in groups:
        for doc in await consumer_progress([addr], group):
            if "error" in doc:
                raise AdminError(f"{addr}: consume stats of {group!r}: {doc['error']}")
            rows += [{"group": group, **r} for r in doc["offsetTable"]]
    return {"brokerAddr": addr, "totalDiff": sum(int(r["diff"]) for r in rows), "rows": rows}


def run_broker_consume_stats(args: argparse.Namespace) -> int:
    if not args.broker_addr or len(addrs(args.broker_addr)) != 1:
        raise UsageError("give one broker with -b/--broker-addr")
    doc = asyncio.run(broker_consume_stats(addrs(args.broker_addr)[0]))
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    rows = [
        [
            r["topic"],
            r["group"],
            r["brokerName"],
            r["queueId"],
            r["brokerOffset"],
            r["consumerOffset"],
            r["diff"],
            iso_ms(int(r.get("lastTimestamp") or 0)),
        ]
        for r in doc["rows"]
    ]
    print_table(
        [
            "#Topic",
            "#Group",
            "#Broker Name",
            "#QID",
            "#Broker Offset",
            "#Consumer Offset",
            "#Diff",
            "#LastTime",
        ],
        rows,
        numeric={3, 4, 5, 6},
    )
    print(f"\nDiff Total: {doc['totalDiff']}")
    return 0
