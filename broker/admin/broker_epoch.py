"""``haproof admin getBrokerEpoch`` (mqadmin's GetBrokerEpochSubCommand): every node of a broker
group (``-b NAME``) or of a cluster (``-c NAME``), found through the name servers, or the nodes
``--broker-addr`` names, asked with GET_BROKER_EPOCH_CACHE (1007); each node's epoch entries
(epoch, startOffset, endOffset; the last one ends at the node's max offset) and its max offset."""

from __future__ import annotations

import argparse
import asyncio
import json

from broker.admin.common import UsageError, addrs, cluster_info, error_of, invoke_all
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand

FIELDS = ("clusterName", "brokerName", "brokerId", "maxOffset")


async def _targets(args) -> list[str]:
    found = addrs(args.broker_addr)
    if args.broker_name or args.cluster_name:
        if not args.namesrv:
            raise UsageError("-b/-c name brokers through the name servers: give -n")
        info = await cluster_info(addrs(args.namesrv))
        names = {args.broker_name} if args.broker_name else None
        if args.cluster_name:
            clusters = info.get("clusterAddrTable") or {}
            if args.cluster_name not in clusters:
                known = ", ".join(sorted(clusters)) or "none"
                raise UsageError(
                    f"the name servers know no cluster {args.cluster_name!r} ({known})"
                )
            names = set(clusters[args.cluster_name])
        table = info.get("brokerAddrTable") or {}
        if args.broker_name and args.broker_name not in table:
            raise UsageError(f"the name servers know no broker group {args.broker_name!r}")
        for name in sorted(names or ()):
            ids = (table.get(name) or {}).get("brokerAddrs") or {}
            found += [a for _, a in sorted(ids.items(), key=lambda kv: int(kv[0]))]
    if not found:
        raise UsageError("give -b BROKER_NAME or -c CLUSTER (with -n), or --broker-addr")
    return list(dict.fromkeys(found))


def _row(addr: str, resp) -> dict:
    err = error_of(resp)
    if err is not None:
        return {"brokerAddr": addr, "error": err}
    try:
        doc = json.loads(resp.body)
        row = {"brokerAddr": addr, **{k: doc[k] for k in FIELDS}}
        row["epochList"] = [
            {k: int(e[k]) for k in ("epoch", "startOffset", "endOffset")}
            for e in doc.get("epochList") or []
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return {"brokerAddr": addr, "error": f"unreadable epoch cache: {exc!r}"}
    if row["epochList"]:  # as mqadmin: the last entry ends at the max offset
        row["epochList"][-1]["endOffset"] = int(row["maxOffset"])
    return row


def _print(rows: list[dict]) -> None:
    for r in rows:
        print()
        if "error" in r:
            print(f"#brokerAddr\t{r['brokerAddr']}\n#error\t{r['error']}")
            continue
        print(
            f"#clusterName\t{r['clusterName']}\n#brokerName\t{r['brokerName']}\n"
            f"#brokerAddr\t{r['brokerAddr']}\n#brokerId\t{r['brokerId']}\n"
            f"#maxOffset\t{r['maxOffset']}"
        )
        for e in r["epochList"]:
            print(
                f"#Epoch: EpochEntry{{epoch={e['epoch']}, startOffset={e['startOffset']}, "
                f"endOffset={e['endOffset']}}}"
            )


def run_get_broker_epoch(args: argparse.Namespace) -> int:
    targets = asyncio.run(_targets(args))
    request = lambda: RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE)  # noqa: E731
    rows = [_row(a, r) for a, r in asyncio.run(invoke_all(targets, request))]
    if args.json:
        print(json.dumps(rows, sort_keys=True))
    else:
        _print(rows)
    return 1 if any("error" in r for r in rows) else 0
