"""``haproof admin wipeWritePerm`` and ``addWritePerm -b BROKER_NAME -n N``, as mqadmin prints
them: every name server of ``-n`` is asked (WIPE_WRITE_PERM_OF_BROKER 205 /
ADD_WRITE_PERM_OF_BROKER 327) to turn the group's write permission off / back on in its
routes, so producers stop sending to it (before a shutdown) or send again;
``wipe write perm of broker[B] in name server[ADDR] OK, N`` with N the topics changed. The
name server keeps a wipe through the group's later registrations until addWritePerm (a
restarted name server forgets it, as RocketMQ's).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.common import addrs, error_of, invoke_all, need_targets, report_errors
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand

_VERBS = {
    "wipeWritePerm": (RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount", "wipe"),
    "addWritePerm": (RequestCode.ADD_WRITE_PERM_OF_BROKER, "addTopicCount", "add"),
}


async def write_perm(verb: str, namesrv: list[str], broker_name: str) -> list[dict]:
    code, key, _ = _VERBS[verb]
    fields = {"brokerName": broker_name}
    rows = []
    for addr, resp in await invoke_all(namesrv, lambda: RemotingCommand.request(code, fields)):
        err = error_of(resp)
        if err is None:
            rows.append({"namesrvAddr": addr, "topicCount": resp.int_field(key)})
        else:
            rows.append({"namesrvAddr": addr, "error": err})
    return rows


def run(verb: str):
    def run_verb(args: argparse.Namespace) -> int:
        need_targets(args, broker_addr=False)
        rows = asyncio.run(write_perm(verb, addrs(args.namesrv), args.broker_name))
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            what = _VERBS[verb][2]
            for r in rows:
                if "error" not in r:
                    print(
                        f"{what} write perm of broker[{args.broker_name}] in name server"
                        f"[{r['namesrvAddr']}] OK, {r['topicCount']}"
                    )
        return report_errors(verb, rows, who=lambda r: r["namesrvAddr"])

    return run_verb
