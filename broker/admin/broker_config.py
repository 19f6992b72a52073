"""``haproof admin getBrokerConfig`` and ``updateBrokerConfig``.

- ``getBrokerConfig --broker-addr A`` (or ``--namesrv N`` [``--broker-name B``]): every property
  of each node's running config (GET_BROKER_CONFIG 26), marking the runtime-changeable ones.
- ``updateBrokerConfig --key K --value V`` (same targets): change a runtime-changeable key
  (broker/runtime_config.py RUNTIME_KEYS) on each node, which persists it to its config file
  before applying it (UPDATE_BROKER_CONFIG 25). Any other key, or a bad value, is refused
  here with exit 2 before any node is asked.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.cluster import node_addrs
from broker.admin.common import AdminError, error_of, fail, invoke_all, print_table
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from broker.runtime_config import RUNTIME_KEYS, check_updates, parse_properties
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


def _targets(verb: str, args) -> list[str] | int:
    if not args.namesrv and not args.broker_addr:
        return fail(verb, "give --broker-addr or --namesrv", 2)
    try:
        return asyncio.run(node_addrs(args))
    except AdminError as exc:
        return fail(verb, str(exc), 1)


def run_get_broker_config(args: argparse.Namespace) -> int:
    targets = _targets("getBrokerConfig", args)
    if isinstance(targets, int):
        return targets
    docs = asyncio.run(broker_configs(targets))
    if args.json:
        print(json.dumps(docs, indent=2))
    else:
        for i, d in enumerate(docs):
            if i:
                print()
            print(f"broker {d['brokerAddr']}")
            if "error" in d:
                print(f"  {d['error']}")
                continue
            rows = [[k, v, "yes" if k in RUNTIME_KEYS else ""] for k, v in d["config"].items()]
            print_table(["key", "value", "runtime"], rows)
    bad = [d for d in docs if "error" in d]
    for d in bad:
        fail("getBrokerConfig", f"{d['brokerAddr']}: {d['error']}", 1)
    return 1 if bad else 0


async def update_broker_config(targets: list[str], updates: dict[str, str]) -> list[dict]:
    """``{brokerAddr, key, from, to}`` per changed key, or ``{brokerAddr, error}``."""
    body = "".join(f"{k}={v}\n" for k, v in updates.items()).encode("utf-8")
    out = []
    for addr, resp in await invoke_all(
        targets, lambda: RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body)
    ):
        err = error_of(resp)
        if err is None:
            try:
                changes = json.loads(resp.body) if resp.body else {}
                out += [{"brokerAddr": addr, "key": k, "from": c["from"], "to": c["to"]}
                        for k, c in changes.items()]  # fmt: skip
                continue
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                err = f"unreadable answer: {exc!r}"
        out.append({"brokerAddr": addr, "error": err})
    return out


def run_update_broker_config(args: argparse.Namespace) -> int:
    updates = {args.key: args.value}
    try:
        check_updates(updates)
    except ConfigError as exc:
        return fail("updateBrokerConfig", str(exc), 2)
    targets = _targets("updateBrokerConfig", args)
    if isinstance(targets, int):
        return targets
    rows = asyncio.run(update_broker_config(targets, updates))
    if args.json:
        print(json.dumps(rows))
    else:
        table = [[r["brokerAddr"], r["key"], r["from"], r["to"]] for r in rows if "error" not in r]
        print_table(["brokerAddr", "key", "from", "to"], table)
    bad = [r for r in rows if "error" in r]
    for r in bad:
        fail("updateBrokerConfig", f"{r['brokerAddr']}: {r['error']}", 1)
    return 1 if bad or not rows else 0
