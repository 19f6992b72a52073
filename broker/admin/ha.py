"""``haproof admin haStatus`` and ``promote``.

- ``haStatus --broker-addr A`` (or ``--namesrv N --broker-name B``: every node of the group):
  role, epoch, max offset; on a master each slave's ack offset, diff, transfer speed, in-sync.
- ``promote --broker-name B --node N --namesrv N``: make node N the group's master under a new
  epoch and point the other reachable nodes at it (broker/ha/failover.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.common import SIGNER, TIMEOUT_MS, AdminError, UsageError, addrs, new_client
from broker.config import BrokerRole
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError


async def ha_status(broker_addrs: list[str]) -> list[dict]:
    client = new_client()
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
            try:
                out.append({"brokerAddr": addr, **json.loads(resp.body)})
            except (ValueError, TypeError) as exc:
                out.append({"brokerAddr": addr, "error": f"unreadable HA status: {exc}"})
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
            if "syncStateSet" in r:  # controller mode: the master's SyncStateSet (broker ids)
                flight = r.get("syncStateSetProposed")
                print(
                    f"  SyncStateSet {r['syncStateSet']} (epoch {r['syncStateSetEpoch']})"
                    + (f", proposed {flight}" if flight else "")
                )
            print(
                f"  {'slave':<22} {'ackOffset':>14} {'diff':>12} {'speed B/s':>12} inSync"
                + (" inSyncStateSet" if "syncStateSet" in r else "")
            )
            for s in r["slaves"]:
                print(
                    f"  {s['addr']:<22} {s['ackOffset']:>14} {s['diff']:>12} "
                    f"{s['transferSpeedBytesPerS']:>12.0f} {s['inSync']}"
                    + (f" {s.get('inSyncStateSet')}" if "syncStateSet" in r else "")
                )
            if not r["slaves"]:
                print("  no slave connected")


async def group_addrs(args) -> list[str]:
    """``--broker-addr`` addresses, then (with ``--namesrv`` and ``--broker-name``) every node
    of the group as the name servers know it."""
    from broker.ha.failover import FailoverError, group_nodes

    found = addrs(args.broker_addr)
    if args.namesrv and args.broker_name:
        client = new_client()
        try:
            found += await group_nodes(client, addrs(args.namesrv), args.broker_name)
        except FailoverError as exc:
            raise AdminError(str(exc)) from exc
        finally:
            await client.close()
    return list(dict.fromkeys(found))


def run_ha_status(args: argparse.Namespace) -> int:
    if not args.broker_addr and not (args.namesrv and args.broker_name):
        raise UsageError("give --broker-addr, or --namesrv and --broker-name")
    rows = asyncio.run(ha_status(asyncio.run(group_addrs(args))))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_ha_status(rows)
    return 1 if any("error" in r for r in rows) else 0


def run_promote(args: argparse.Namespace) -> int:
    from broker.ha.failover import FailoverError, promote

    if not args.namesrv and not args.broker_addr:
        raise UsageError("give --namesrv or --broker-addr")
    try:
        done = asyncio.run(
            promote(
                args.broker_name,
                args.node,
                namesrv_addrs=addrs(args.namesrv),
                broker_addrs=addrs(args.broker_addr),
                role=BrokerRole(args.role),
                rpc_hook=SIGNER.get(),
                unclean=args.unclean,
            )
        )
    except FailoverError as exc:
        raise AdminError(str(exc)) from exc
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
