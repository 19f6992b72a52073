"""``haproof admin queryMsgByKey -t T -k KEY [-b BEGIN] [-e END] [-c MAX] [-n N]``, as mqadmin.

Each master of a group the topic's route names is asked (QUERY_MESSAGE 12) for the messages
whose ``KEYS`` or ``UNIQ_KEY`` is the key, stored between ``-b`` and ``-e`` (ms or a time, as
resetOffsetByTime reads them); mqadmin's ``#Message ID #QID #Offset`` rows, the newest first
(the message id is the client's UNIQ_KEY when it has one, else the offset msgId), or with
``--json`` each message in full. haproof's brokers keep no key index: each reads the topic's
newest messages (broker/processors/message_query.py), so an old message may not be found.
Nothing found anywhere is exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.cluster import topic_route
from broker.admin.common import (
    AdminError,
    addrs,
    error_of,
    invoke_all,
    need_targets,
    parse_time_ms,
    report_errors,
)
from broker.admin.messages import message_json
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import HaproofError
from contracts.record.reader import scan_records


async def messages_by_key(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """(messages as ``--json`` rows, per broker errors)."""
    route = await topic_route(addrs(args.namesrv), args.topic)
    masters = [
        (bd["brokerName"], bd["brokerAddrs"]["0"])
        for bd in route.get("brokerDatas") or []
        if "0" in (bd.get("brokerAddrs") or {})
    ]
    fields = {
        "topic": args.topic,
        "key": args.key,
        "maxNum": args.max_num,
        "beginTimestamp": parse_time_ms(args.begin) if args.begin else 0,
        "endTimestamp": parse_time_ms(args.end) if args.end else 2**63 - 1,
    }
    answers = await invoke_all(
        [a for _n, a in masters], lambda: RemotingCommand.request(RequestCode.QUERY_MESSAGE, fields)
    )
    rows, errors = [], []
    for (name, addr), (_a, resp) in zip(masters, answers, strict=True):
        if isinstance(resp, RemotingCommand) and resp.code == ResponseCode.QUERY_NOT_FOUND:
            continue
        err = error_of(resp)
        if err is None:
            try:
                recs = list(scan_records(resp.body, source=f"{addr} QUERY_MESSAGE"))
            except HaproofError as exc:
                err = f"unreadable records: {exc}"
            else:
                rows += [{"brokerName": name, "brokerAddr": addr, **message_json(r)} for r in recs]
                continue
        errors.append({"brokerAddr": addr, "brokerName": name, "error": err})
    rows.sort(key=lambda r: r["storeTimestamp"], reverse=True)
    return rows[: args.max_num], errors


def run_query_msg_by_key(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    rows, errors = asyncio.run(messages_by_key(args))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'#Message ID':<50} {'#QID':>4} {'#Offset':>40}")
        for r in rows:
            msg_id = r["properties"].get("UNIQ_KEY") or r["msgId"]
            print(f"{msg_id:<50} {r['queueId']:>4} {r['queueOffset']:>40}")
    failed = report_errors("queryMsgByKey", errors)
    if not rows and not failed:
        raise AdminError(f"no message of key {args.key!r} in topic {args.topic}")
    return failed
