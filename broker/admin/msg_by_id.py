"""``haproof admin queryMsgById -t T -i MSGID [-n N]``, as mqadmin prints it.

The offset msgId (mqadmin's ``OffsetID``, ``sendMessage``'s ``offsetMsgId``) names the broker
that stored the message (its address) and the commit log offset; that broker is asked once
(VIEW_MESSAGE_BY_ID 33 with ``topic`` and ``offset``) and the record it answers is printed as
``queryMsgByOffset`` prints one. A client's unique key (``msgId``, UNIQ_KEY) is not an offset
msgId: mqadmin then searches the index (QUERY_MESSAGE 12), which haproof does not serve yet.
With ``-n`` the broker's group name is shown, else its address.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.common import AdminError, UsageError, addrs, cluster_info, error_of, invoke_all
from broker.admin.messages import message_json, print_message
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from contracts.errors import HaproofError
from contracts.record.ids import parse_message_id
from contracts.record.reader import decode_record


def broker_of(msg_id: str) -> tuple[str, int]:
    """(broker address, commit log offset) an offset msgId names; UsageError if it is none."""
    try:
        host, port, offset = parse_message_id(msg_id.strip())
    except ValueError as exc:
        raise UsageError(f"-i {msg_id!r} is not an offset msgId: {exc}") from None
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}", offset


async def _name_of(namesrv: list[str], addr: str) -> str:
    info = await cluster_info(namesrv)
    for name, data in (info.get("brokerAddrTable") or {}).items():
        if addr in (data.get("brokerAddrs") or {}).values():
            return name
    return addr


async def view_message(topic: str, msg_id: str, namesrv: list[str]):
    """(broker name or address, broker address, the record)."""
    addr, offset = broker_of(msg_id)
    fields = {"topic": topic, "offset": offset}
    [(_a, resp)] = await invoke_all(
        [addr], lambda: RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, fields)
    )
    err = error_of(resp)
    if err is not None:
        raise AdminError(f"{addr}: message {msg_id} of topic {topic}: {err}")
    try:
        rec = decode_record(resp.body, base_offset=offset, source=f"{addr} VIEW_MESSAGE_BY_ID")
    except HaproofError as exc:
        raise AdminError(f"{addr} answered an unreadable record: {exc}") from None
    name = await _name_of(namesrv, addr) if namesrv else addr
    return name, addr, rec


def run_query_msg_by_id(args: argparse.Namespace) -> int:
    name, addr, rec = asyncio.run(view_message(args.topic, args.msg_id, addrs(args.namesrv)))
    if args.json:
        print(json.dumps({"brokerName": name, "brokerAddr": addr, **message_json(rec)}, indent=2))
    else:
        print_message(name, rec)
    return 0
