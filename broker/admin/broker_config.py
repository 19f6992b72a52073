"""``haproof admin getBrokerConfig`` and ``updateBrokerConfig``.

- ``getBrokerConfig --broker-addr A`` (or ``--namesrv N`` [``--broker-name B``]): every property
  of each node's running config (GET_BROKER_CONFIG 26), marking the runtime-changeable ones.
- ``updateBrokerConfig --key K --value V`` (same targets): each node persists the key to its
  config file (UPDATE_BROKER_CONFIG 25), then applies it if it is runtime-changeable
  (broker/runtime_config.py RUNTIME_KEYS); another key of the config is "saved; takes effect
  at the next start". A key of the black list, an unknown key (with "did you mean") or a bad
  runtime value is refused here with exit 2 before any node is asked.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.cluster import node_addrs
from broker.admin.common import (
    UsageError,
    error_of,
    invoke_all,
    need_targets,
    print_blocks,
    print_table,
    report_errors,
    update_config,
)
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from broker.runtime_config import NEXT_START, RUNTIME_KEYS, check_updates, parse_properties
from contracts.errors import ConfigError


async def broker_configs(targets: list[str]) -> list[dict]:
    """``{brokerAddr, version, config}`` or ``{brokerAddr, error}`` per address."""
    out = []
    for addr, resp in await invoke_all(
        targets, lambda: RemotingCommand.request(RequestCode.GET_BROKER_CONFIG)
    ):
        err = error_of(resp)
        if err is None:
            try:
                props = parse_properties(resp.body.decode("utf-8"), f"config of {addr}")
                version = json.loads(resp.ext_fields.get("version") or "null")
                out.append({"brokerAddr": addr, "version": version, "config": props})
                continue
            except (ValueError, ConfigError) as exc:
                err = f"unreadable config: {exc}"
        out.append({"brokerAddr": addr, "error": err})
    return out


def _print_config(doc: dict) -> None:
    rows = [[k, v, "yes" if k in RUNTIME_KEYS else ""] for k, v in doc["config"].items()]
    print_table(["key", "value", "runtime"], rows)


def run_get_broker_config(args: argparse.Namespace) -> int:
    need_targets(args)
    docs = asyncio.run(broker_configs(asyncio.run(node_addrs(args))))
    if args.json:
        print(json.dumps(docs, indent=2))
    else:
        print_blocks(docs, _print_config)
    return report_errors("getBrokerConfig", docs)


async def update_broker_config(targets: list[str], updates: dict[str, str]) -> list[dict]:
    """``{brokerAddr, key, from, to}`` per changed key, or ``{brokerAddr, error}``."""
    return await update_config(targets, RequestCode.UPDATE_BROKER_CONFIG, updates, "brokerAddr")


def _effect(row: dict) -> str:
    return NEXT_START if row.get("effect") == "next start" else "applied"


def run_update_broker_config(args: argparse.Namespace) -> int:
    updates = {args.key: args.value}
    try:
        check_updates(updates)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    need_targets(args)
    rows = asyncio.run(update_broker_config(asyncio.run(node_addrs(args)), updates))
    if args.json:
        print(json.dumps(rows))
    else:
        table = [
            [r["brokerAddr"], r["key"], r["from"], r["to"], _effect(r)]
            for r in rows
            if "error" not in r
        ]
        print_table(["brokerAddr", "key", "from", "to", "effect"], table)
    return report_errors("updateBrokerConfig", rows) or (0 if rows else 1)
