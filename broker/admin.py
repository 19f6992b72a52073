"""``haproof admin``: operate a running broker group, as mqadmin does.

- ``haStatus --broker-addr A`` (or ``--namesrv N --broker-name B``: every node of the group):
  role, epoch, max offset; on a master each slave's ack offset, diff, transfer speed, in-sync.
- ``promote --broker-name B --node N --namesrv N``: make node N the group's master under a new
  epoch and point the other reachable nodes at it (broker/ha/failover.py).

Exit codes: 0 done, 1 a broker or name server could not be reached or refused, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from broker.config import BrokerRole
from broker.errors import HaproofError, RemotingError
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand

TIMEOUT_MS = 5000


class AdminError(HaproofError):
    """A broker or name server could not be reached or refused (exit 1)."""


def _addrs(raw: str | None) -> list[str]:
    return [a.strip() for a in (raw or "").split(";") if a.strip()]


async def ha_status(broker_addrs: list[str]) -> list[dict]:
    client = RemotingClient()
    out = []
    try:
        for addr in broker_addrs:
            req = RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS)
            try:
                resp = await client.invoke(addr, req, TIMEOUT_MS)
            except RemotingError as exc:
                out.append({"brokerAddr": addr, "error": str(exc)})
                continue
            if resp.code != ResponseCode.SUCCESS:
                out.append({"brokerAddr": addr, "error": resp.remark or f"code {resp.code}"})
                continue
            out.append(json.loads(resp.body))
    finally:
        await client.close()
    return out


def print_ha_status(rows: list[dict]) -> None:
    for r in rows:
        if "error" in r:
            print(f"{r['brokerAddr']}: unreachable ({r['error']})")
            continue
        print(
            f"{r['nodeName']} {r['brokerAddr']} {r['brokerRole']} brokerId {r['brokerId']} "
            f"epoch {r['epoch']} maxOffset {r['maxOffset']}"
        )
        if "masterHaAddress" in r:
            state = "connected" if r.get("masterConnected") else "NOT connected"
            print(f"  master HA {r['masterHaAddress']} ({state})")
        if "slaves" in r:
            print(f"  confirmOffset {r['confirmOffset']}")
            print(f"  {'slave':<22} {'ackOffset':>14} {'diff':>12} {'speed B/s':>12} inSync")
            for s in r["slaves"]:
                print(
                    f"  {s['addr']:<22} {s['ackOffset']:>14} {s['diff']:>12} "
                    f"{s['transferSpeedBytesPerS']:>12.0f} {s['inSync']}"
                )
            if not r["slaves"]:
                print("  no slave connected")


async def _group_addrs(args) -> list[str]:
    from broker.ha.failover import FailoverError, group_nodes

    addrs = _addrs(args.broker_addr)
    if args.namesrv and args.broker_name:
        client = RemotingClient()
        try:
            addrs += await group_nodes(client, _addrs(args.namesrv), args.broker_name)
        except FailoverError as exc:
            raise AdminError(str(exc)) from exc
        finally:
            await client.close()
    return list(dict.fromkeys(addrs))


def run_ha_status(args: argparse.Namespace) -> int:
    addrs = asyncio.run(_group_addrs(args))
    if not addrs:
        print("haproof admin haStatus: give --broker-addr, or --namesrv and --broker-name",
              file=sys.stderr)  # fmt: skip
        return 2
    rows = asyncio.run(ha_status(addrs))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_ha_status(rows)
    return 1 if any("error" in r for r in rows) else 0


def run_promote(args: argparse.Namespace) -> int:
    from broker.ha.failover import FailoverError, promote

    if not args.namesrv and not args.broker_addr:
        print("haproof admin promote: give --namesrv or --broker-addr", file=sys.stderr)
        return 2
    try:
        done = asyncio.run(
            promote(
                args.broker_name,
                args.node,
                namesrv_addrs=_addrs(args.namesrv),
                broker_addrs=_addrs(args.broker_addr),
                role=BrokerRole(args.role),
            )
        )
    except FailoverError as exc:
        print(f"haproof admin promote: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(done))
    else:
        slaves = ", ".join(done["slaves"]) or "none reachable"
        print(
            f"{done['master']} ({done['masterAddr']}) is master of {done['brokerName']} "
            f"under epoch {done['epoch']}; slaves following it: {slaves}"
        )
        if done["unreachable"]:
            print(f"unreachable (not changed): {', '.join(done['unreachable'])}")
    return 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("admin", help="haStatus, promote ... on a running group")
    sub = p.add_subparsers(dest="admin_command", metavar="ACTION")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--namesrv", default=None, help="name server address(es), ';'-separated")
        q.add_argument("--broker-addr", default=None, help="broker address(es), ';'-separated")
        q.add_argument("--json", action="store_true", help="JSON output")

    q = sub.add_parser("haStatus", help="replication state of a group's nodes")
    common(q)
    q.add_argument("--broker-name", default=None)
    q.set_defaults(func=run_ha_status)

    q = sub.add_parser("promote", help="make a node the group's master under a new epoch")
    common(q)
    q.add_argument("--broker-name", required=True)
    q.add_argument("--node", required=True, help="the node's stable name (nodeName)")
    q.add_argument(
        "--role",
        default="SYNC_MASTER",
        choices=["SYNC_MASTER", "ASYNC_MASTER"],
        help="the new master's role (default SYNC_MASTER)",
    )
    q.set_defaults(func=run_promote)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
