"""``haproof admin queryMsgByOffset``, ``printMsg``, ``consumeMessage`` and ``sendMessage``.

- ``queryMsgByOffset -n N -t T -b BROKER_NAME -i QUEUE -o OFFSET``: the message at that queue
  offset, read from the group's master with one PULL_MESSAGE (11), printed as mqadmin prints a
  message (OffsetID, Topic, Tags, Keys, Queue ID, ... Message Body).
- ``printMsg -n N -t T`` / ``consumeMessage -n N -t T [-b BROKER_NAME] [-i QUEUE] [-o OFFSET]
  [-c COUNT]``: messages of every queue (or one) from its min offset (or OFFSET), at most
  COUNT (default 128), as mqadmin's ``MSGID: ... BODY: ...`` lines; pulls under the group
  ``TOOLS_CONSUMER`` and commits nothing.
- ``sendMessage -n N -t T -p BODY [-k KEYS] [-c TAGS]``: one message through the producer
  (SEND_MESSAGE_V2), printed as mqadmin's ``#Broker Name #QID #Send Result #MsgId`` table.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json

from broker.admin.cluster import topic_route
from broker.admin.common import (
    SIGNER,
    TIMEOUT_MS,
    AdminError,
    UsageError,
    addrs,
    iso_ms,
    need_targets,
    new_client,
    print_table,
)
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import HaproofError, RemotingError
from contracts.record.reader import record_to_json

TOOLS_GROUP = "TOOLS_CONSUMER"  # the group mqadmin pulls under
PULL_BATCH = 32
PULL_FLAG_SUBSCRIPTION = 0x4


def message_json(rec) -> dict:
    """A record for ``--json``: its decoded fields, and its body as text when it is UTF-8,
    else as base64."""
    doc = record_to_json(rec)
    try:
        doc["body"] = rec.body.decode("utf-8")
    except UnicodeDecodeError:
        doc["bodyBase64"] = base64.b64encode(rec.body).decode()
    return doc


async def _queues(namesrv: list[str], topic: str, broker_name, queue) -> list[tuple[str, str, int]]:
    """(brokerName, master address, queueId) of the topic's readable queues."""
    route = await topic_route(namesrv, topic)
    nums = {q["brokerName"]: int(q["readQueueNums"]) for q in route.get("queueDatas") or []}
    out = []
    for bd in route.get("brokerDatas") or []:
        name, ids = bd["brokerName"], bd.get("brokerAddrs") or {}
        if broker_name not in (None, name) or "0" not in ids:
            continue
        out += [(name, ids["0"], q) for q in range(nums.get(name, 0)) if queue in (None, q)]
    if not out:
        where = f" on {broker_name}" if broker_name else ""
        raise AdminError(f"topic {args_q(topic, queue)} has no readable queue{where} with a master")
    return out


def args_q(topic: str, queue) -> str:
    return repr(topic) if queue is None else f"{topic!r} queue {queue}"


async def _offset(client, addr: str, code: RequestCode, topic: str, q: int) -> int:
    resp = await client.invoke(
        addr, RemotingCommand.request(code, {"topic": topic, "queueId": q}), TIMEOUT_MS
    )
    if resp.code != ResponseCode.SUCCESS:
        raise AdminError(f"{addr}: {code.name} {topic}/{q} refused: {resp.remark}")
    return resp.int_field("offset")


async def pull(client, addr: str, topic: str, q: int, offset: int, n: int) -> tuple[list, int]:
    """Up to ``n`` records of queue ``q`` from ``offset``, and the next offset to pull."""
    from broker.client.consumer import decode_pull_body

    header = {
        "consumerGroup": TOOLS_GROUP,
        "topic": topic,
        "queueId": q,
        "queueOffset": offset,
        "maxMsgNums": n,
        "sysFlag": PULL_FLAG_SUBSCRIPTION,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
    }
    resp = await client.invoke(
        addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header), TIMEOUT_MS
    )
    if resp.code == ResponseCode.SUCCESS:
        return decode_pull_body(resp.body, f"pull {addr} {topic}/{q}"), resp.int_field(
            "nextBeginOffset"
        )
    if resp.code in (
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    ):
        return [], resp.int_field("nextBeginOffset")
    raise AdminError(f"{addr}: pull {topic}/{q}@{offset} refused: {resp.code} {resp.remark}")


async def read_messages(namesrv, topic, broker_name=None, queue=None, offset=None, count=128):
    """Messages of the chosen queues, each from ``offset`` (default its min offset), at most
    ``count`` in all: ``[(brokerName, record)]``."""
    client = new_client()
    out: list[tuple[str, object]] = []
    try:
        for name, addr, q in await _queues(namesrv, topic, broker_name, queue):
            at = offset
            if at is None:
                at = await _offset(client, addr, RequestCode.GET_MIN_OFFSET, topic, q)
            top = await _offset(client, addr, RequestCode.GET_MAX_OFFSET, topic, q)
            while at < top and len(out) < count:
                recs, nxt = await pull(
                    client, addr, topic, q, at, min(PULL_BATCH, count - len(out))
                )
                out += [(name, r) for r in recs]
                if nxt <= at:
                    break
                at = nxt
    except RemotingError as exc:
        raise AdminError(str(exc)) from exc
    finally:
        await client.close()
    return out[:count]


def _tags_keys(rec) -> tuple[str, str]:
    return rec.properties.get("TAGS", ""), rec.properties.get("KEYS", "")


def print_message(name: str, rec) -> None:
    """One message as mqadmin's queryMsgById / queryMsgByOffset print it."""
    tags, keys = _tags_keys(rec)
    body = rec.body.decode("utf-8", errors="replace")
    for label, value in (
        ("OffsetID", rec.msg_id),
        ("Topic", rec.topic),
        ("Tags", f"[{tags}]"),
        ("Keys", f"[{keys}]"),
        ("Broker Name", name),
        ("Queue ID", rec.queue_id),
        ("Queue Offset", rec.queue_offset),
        ("CommitLog Offset", rec.physical_offset),
        ("Reconsume Times", rec.reconsume_times),
        ("Born Timestamp", iso_ms(rec.born_timestamp)),
        ("Store Timestamp", iso_ms(rec.store_timestamp)),
        ("Born Host", f"{rec.born_host[0]}:{rec.born_host[1]}"),
        ("Store Host", f"{rec.store_host[0]}:{rec.store_host[1]}"),
        ("System Flag", rec.sysflag),
        ("Properties", json.dumps(rec.properties)),
        ("Message Body", body),
    ):
        print(f"{label + ':':<21}{value}")


def run_query_msg_by_offset(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    if args.queue < 0 or args.offset < 0:
        raise UsageError(f"-i ({args.queue}) and -o ({args.offset}) must be >= 0")
    got = asyncio.run(
        read_messages(addrs(args.namesrv), args.topic, args.broker_name, args.queue, args.offset, 1)
    )
    if not got or got[0][1].queue_offset != args.offset:
        raise AdminError(
            f"no message at {args.broker_name} {args.topic}/{args.queue} offset {args.offset}"
        )
    name, rec = got[0]
    if args.json:
        print(json.dumps({"brokerName": name, **message_json(rec)}, indent=2))
    else:
        print_message(name, rec)
    return 0


def run_print_msg(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    if args.count <= 0:
        raise UsageError(f"-c/--count must be > 0, got {args.count}")
    got = asyncio.run(
        read_messages(
            addrs(args.namesrv),
            args.topic,
            getattr(args, "broker_name", None),
            getattr(args, "queue", None),
            getattr(args, "offset", None),
            args.count,
        )
    )
    if args.json:
        print(json.dumps([{"brokerName": n, **message_json(r)} for n, r in got], indent=2))
    else:
        for name, rec in got:
            body = rec.body.decode("utf-8", errors="replace")
            print(
                f"MSGID: {rec.msg_id} {name}/{rec.queue_id}@{rec.queue_offset} "
                f"TAGS: {_tags_keys(rec)[0]} BODY: {body}"
            )
    return 0


async def send_message(namesrv: list[str], topic: str, body: bytes, tags, keys) -> dict:
    from broker.client.producer import Producer

    producer = Producer("TOOLS_PRODUCER", namesrv, rpc_hook=SIGNER.get())
    try:
        res = await producer.send(topic, body, tags=tags, keys=keys)
    except (RemotingError, HaproofError) as exc:
        raise AdminError(f"send to {topic!r} failed: {exc}") from exc
    finally:
        await producer.close()
    return {
        "brokerName": res.queue.broker_name,
        "queueId": res.queue.queue_id,
        "sendResult": res.status.name,
        "msgId": res.msg_id,
        "offsetMsgId": res.offset_msg_id,
        "queueOffset": res.queue_offset,
    }


def run_send_message(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    doc = asyncio.run(
        send_message(
            addrs(args.namesrv), args.topic, args.body.encode("utf-8"), args.tags, args.keys
        )
    )
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(
            ["#Broker Name", "#QID", "#Send Result", "#MsgId"],
            [[doc["brokerName"], doc["queueId"], doc["sendResult"], doc["msgId"]]],
        )
    return 0 if doc["sendResult"] == "SEND_OK" else 1
