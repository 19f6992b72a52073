"""``haproof admin getNamesrvConfig`` and ``updateNamesrvConfig`` (``-n N``, as mqadmin).

- ``getNamesrvConfig``: each name server's settings (GET_NAMESRV_CONFIG 319), mqadmin's
  ``============ADDR============`` block of ``key = value`` lines per name server.
- ``updateNamesrvConfig -k K -v V``: a runtime-changeable key (broker/namesrv_config.py) on
  every name server, persisted to its namesrv.conf (UPDATE_NAMESRV_CONFIG 318); an unknown key
  ("did you mean") or a static one is refused here with exit 2 before any is asked.
Both are admin operations under ACL.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.common import (
    UsageError,
    addrs,
    error_of,
    invoke_all,
    need_targets,
    report_errors,
    update_config,
)
from broker.namesrv_config import check_namesrv_updates
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from broker.runtime_config import parse_properties
from contracts.errors import ConfigError


def _who(row: dict) -> str:
    return row["namesrvAddr"]


async def namesrv_configs(targets: list[str]) -> list[dict]:
    """``{namesrvAddr, config}`` or ``{namesrvAddr, error}`` per name server."""
    out = []
    answers = await invoke_all(
        targets, lambda: RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG)
    )
    for addr, resp in answers:
        err = error_of(resp)
        if err is None:
            try:
                config = parse_properties(resp.body.decode("utf-8"), f"config of {addr}")
                out.append({"namesrvAddr": addr, "config": config})
                continue
            except (ValueError, ConfigError) as exc:
                err = f"unreadable config: {exc}"
        out.append({"namesrvAddr": addr, "error": err})
    return out


def run_get_namesrv_config(args: argparse.Namespace) -> int:
    need_targets(args, broker_addr=False)
    docs = asyncio.run(namesrv_configs(addrs(args.namesrv)))
    if args.json:
        print(json.dumps(docs, indent=2))
    else:
        for doc in docs:
            print(f"============{doc['namesrvAddr']}============")
            for key, value in doc.get("config", {}).items():
                print(f"{key:<50s}= {value}")
    return report_errors("getNamesrvConfig", docs, who=_who)


async def update_namesrv_config(targets: list[str], updates: dict[str, str]) -> list[dict]:
    """``{namesrvAddr, key, from, to}`` per change, or ``{namesrvAddr, error}``."""
    return await update_config(targets, RequestCode.UPDATE_NAMESRV_CONFIG, updates, "namesrvAddr")


def run_update_namesrv_config(args: argparse.Namespace) -> int:
    updates = {args.key: args.value}
    try:
        check_namesrv_updates(updates)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    need_targets(args, broker_addr=False)
    rows = asyncio.run(update_namesrv_config(addrs(args.namesrv), updates))
    if args.json:
        print(json.dumps(rows))
    else:
        done = [r["namesrvAddr"] for r in rows if "error" not in r]
        if done:
            print(f"update name server config success!{done}\n{args.key} : {args.value}")
    return report_errors("updateNamesrvConfig", rows, who=_who)
