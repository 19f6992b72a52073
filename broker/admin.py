"""``haproof admin``: operate a running broker group, as mqadmin does.

- ``haStatus --broker-addr A`` (or ``--namesrv N --broker-name B``: every node of the group):
  role, epoch, max offset; on a master each slave's ack offset, diff, transfer speed, in-sync.
- ``promote --broker-name B --node N --namesrv N``: make node N the group's master under a new
  epoch and point the other reachable nodes at it (broker/ha/failover.py).
- ``consumerProgress --group G [--topic T]`` (``--namesrv``: every group's master, or its
  lowest-id node when it has none; or ``--broker-addr``): per queue broker offset, consumer
  offset and diff, as mqadmin consumerProgress (GET_CONSUME_STATS 208).
- ``resetOffset --group G --topic T --queue Q --offset O`` (``--namesrv`` [``--broker-name``]:
  the master first, then the group's other nodes, so a slave's forward-only copy cannot undo
  it; or ``--broker-addr`` in the order given): the one recorded way to move a committed offset
  backwards (INVOKE_BROKER_TO_RESET_OFFSET 222, broker/processors/ha_admin.py). Stop the
  group's consumers first.

Exit codes: 0 done, 1 a broker or name server could not be reached or refused, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import sys

from broker.acl.signing import AclSigner
from broker.config import BrokerRole
from broker.errors import HaproofError, RemotingError
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand

TIMEOUT_MS = 5000


class AdminError(HaproofError):
    """A broker or name server could not be reached or refused (exit 1)."""


# This command's ACL signer (set from --access-key / HAPROOF_ACCESS_KEY and the secret key);
# asyncio.run copies the context, so every client made below signs with it.
_SIGNER: contextvars.ContextVar = contextvars.ContextVar("haproof_admin_signer", default=None)


def _client() -> RemotingClient:
    return RemotingClient(rpc_hook=_SIGNER.get())


def _signed(run):
    """Wrap a ``run_*`` so it signs with the credentials its arguments name (exit 2 if bad)."""

    def wrapped(args: argparse.Namespace) -> int:
        ak = args.access_key or os.environ.get("HAPROOF_ACCESS_KEY")
        sk = os.environ.get("HAPROOF_SECRET_KEY")
        if args.secret_key_file:
            try:
                with open(args.secret_key_file, encoding="utf-8") as fh:
                    sk = fh.read().strip()
            except OSError as exc:
                print(f"haproof admin: cannot read --secret-key-file {args.secret_key_file}: "
                      f"{exc.strerror}", file=sys.stderr)  # fmt: skip
                return 2
        if bool(ak) != bool(sk):
            print("haproof admin: an access key needs a secret key (HAPROOF_SECRET_KEY or "
                  "--secret-key-file) and the other way round", file=sys.stderr)  # fmt: skip
            return 2
        _SIGNER.set(AclSigner(ak, sk) if ak else None)
        return run(args)

    return wrapped


def _addrs(raw: str | None) -> list[str]:
    return [a.strip() for a in (raw or "").split(";") if a.strip()]


async def ha_status(broker_addrs: list[str]) -> list[dict]:
    client = _client()
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
        client = _client()
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
                rpc_hook=_SIGNER.get(),
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


async def _cluster_table(client: RemotingClient, namesrv_addrs: list[str]) -> dict:
    """brokerName → {brokerId: addr} from the first name server that answers."""
    last: Exception | None = None
    for addr in namesrv_addrs:
        try:
            resp = await client.invoke(
                addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT_MS
            )
        except RemotingError as exc:
            last = exc
            continue
        if resp.code != ResponseCode.SUCCESS:
            last = AdminError(f"name server {addr} refused: {resp.remark}")
            continue
        table = json.loads(resp.body).get("brokerAddrTable", {})
        return {
            name: {int(i): a for i, a in (data.get("brokerAddrs") or {}).items()}
            for name, data in table.items()
        }
    raise AdminError(f"no name server answered ({'; '.join(namesrv_addrs)}): {last}")


async def _invoke_all(addrs: list[str], make_request) -> list[tuple[str, object]]:
    """(addr, response or the RemotingError) for each address, in order."""
    client = _client()
    out: list[tuple[str, object]] = []
    try:
        for addr in addrs:
            try:
                out.append((addr, await client.invoke(addr, make_request(), TIMEOUT_MS)))
            except RemotingError as exc:
                out.append((addr, exc))
    finally:
        await client.close()
    return out


async def consumer_progress(broker_addrs: list[str], group: str, topic: str | None = None):
    """One document per broker: GET_CONSUME_STATS's answer, or ``{brokerAddr, error}``."""
    fields = {"consumerGroup": group, **({"topic": topic} if topic else {})}
    out = []
    for addr, resp in await _invoke_all(
        broker_addrs, lambda: RemotingCommand.request(RequestCode.GET_CONSUME_STATS, fields)
    ):
        if isinstance(resp, Exception):
            out.append({"brokerAddr": addr, "error": f"unreachable: {resp}"})
        elif resp.code != ResponseCode.SUCCESS:
            out.append({"brokerAddr": addr, "error": resp.remark or f"code {resp.code}"})
        else:
            out.append(json.loads(resp.body))
    return out


def print_consumer_progress(group: str, docs: list[dict]) -> None:
    print(f"consumer group {group}")
    print(
        f"{'topic':<24} {'broker':<14} {'queue':>5} {'brokerOffset':>13} "
        f"{'consumerOffset':>15} {'diff':>10}"
    )
    total = 0
    for d in docs:
        if "error" in d:
            print(f"{d['brokerAddr']}: {d['error']}")
            continue
        for r in d["offsetTable"]:
            total += r["diff"]
            print(
                f"{r['topic']:<24} {r['brokerName']:<14} {r['queueId']:>5} "
                f"{r['brokerOffset']:>13} {r['consumerOffset']:>15} {r['diff']:>10}"
            )
    print(f"diff total: {total}")


async def _progress_addrs(args) -> list[str]:
    addrs = _addrs(args.broker_addr)
    if args.namesrv:
        client = _client()
        try:
            table = await _cluster_table(client, _addrs(args.namesrv))
        finally:
            await client.close()
        for _name, ids in sorted(table.items()):
            if ids:
                addrs.append(ids[min(ids)])
    return list(dict.fromkeys(addrs))


def run_consumer_progress(args: argparse.Namespace) -> int:
    if not args.namesrv and not args.broker_addr:
        print("haproof admin consumerProgress: give --namesrv or --broker-addr", file=sys.stderr)
        return 2
    try:
        addrs = asyncio.run(_progress_addrs(args))
    except AdminError as exc:
        print(f"haproof admin consumerProgress: {exc}", file=sys.stderr)
        return 1
    docs = asyncio.run(consumer_progress(addrs, args.group, args.topic))
    if args.json:
        print(json.dumps(docs, indent=2))
    else:
        print_consumer_progress(args.group, docs)
    unreachable = [d for d in docs if str(d.get("error", "")).startswith("unreachable")]
    if unreachable or all("error" in d for d in docs):
        for d in docs:
            if "error" in d:
                print(f"haproof admin consumerProgress: {d['brokerAddr']}: {d['error']}",
                      file=sys.stderr)  # fmt: skip
        return 1
    return 0


async def reset_offset(
    broker_addrs: list[str], group: str, topic: str, queue_id: int, offset: int
) -> list[dict]:
    """Reset on each address in order; ``{brokerAddr, previousOffset}`` or ``{.., error}``."""
    fields = {"group": group, "topic": topic, "queueId": queue_id, "offset": offset,
              "timestamp": -1, "isForce": True}  # fmt: skip
    out = []
    for addr, resp in await _invoke_all(
        broker_addrs,
        lambda: RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields),
    ):
        if isinstance(resp, Exception):
            out.append({"brokerAddr": addr, "error": f"unreachable: {resp}"})
        elif resp.code != ResponseCode.SUCCESS:
            out.append({"brokerAddr": addr, "error": resp.remark or f"code {resp.code}"})
        else:
            prev = int(resp.ext_fields.get("previousOffset", -1))
            out.append({"brokerAddr": addr, "previousOffset": prev, "offset": offset})
    return out


async def _reset_addrs(args) -> list[str]:
    """The group's nodes, master (brokerId 0) first."""
    addrs = _addrs(args.broker_addr)
    if not args.namesrv:
        return addrs
    from broker.client.routes import fetch_route

    client = _client()
    try:
        name = args.broker_name
        if name is None:
            try:
                route = await fetch_route(client, _addrs(args.namesrv), args.topic)
            except RemotingError as exc:
                raise AdminError(f"no route for topic {args.topic!r}: {exc}") from exc
            names = sorted(route.broker_addrs)
            if len(names) != 1:
                raise AdminError(
                    f"topic {args.topic!r} is on broker groups {names}: give --broker-name"
                )
            name = names[0]
        table = await _cluster_table(client, _addrs(args.namesrv))
    finally:
        await client.close()
    ids = table.get(name)
    if not ids:
        raise AdminError(f"the name servers know no node of broker group {name!r}")
    return list(dict.fromkeys(addrs + [ids[i] for i in sorted(ids)]))


def run_reset_offset(args: argparse.Namespace) -> int:
    if not args.namesrv and not args.broker_addr:
        print("haproof admin resetOffset: give --namesrv or --broker-addr", file=sys.stderr)
        return 2
    if args.queue < 0 or args.offset < 0:
        print(f"haproof admin resetOffset: --queue ({args.queue}) and --offset ({args.offset}) "
              "must be >= 0", file=sys.stderr)  # fmt: skip
        return 2
    try:
        addrs = asyncio.run(_reset_addrs(args))
    except AdminError as exc:
        print(f"haproof admin resetOffset: {exc}", file=sys.stderr)
        return 1
    rows = asyncio.run(reset_offset(addrs, args.group, args.topic, args.queue, args.offset))
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            if "error" in r:
                print(f"{r['brokerAddr']}: FAILED: {r['error']}")
            else:
                print(
                    f"{r['brokerAddr']}: {args.group} {args.topic}/{args.queue} "
                    f"{r['previousOffset']} -> {r['offset']}"
                )
    failed = [r for r in rows if "error" in r]
    for r in failed:
        print(f"haproof admin resetOffset: {r['brokerAddr']}: {r['error']}", file=sys.stderr)
    return 1 if failed or not rows else 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("admin", help="haStatus, promote ... on a running group")
    sub = p.add_subparsers(dest="admin_command", metavar="ACTION")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--namesrv", default=None, help="name server address(es), ';'-separated")
        q.add_argument("--broker-addr", default=None, help="broker address(es), ';'-separated")
        q.add_argument("--json", action="store_true", help="JSON output")
        q.add_argument(
            "--access-key",
            default=None,
            help="ACL account to sign with (default: $HAPROOF_ACCESS_KEY); its secret key comes "
            "from $HAPROOF_SECRET_KEY or --secret-key-file",
        )
        q.add_argument("--secret-key-file", default=None, help="file holding the secret key")

    q = sub.add_parser("haStatus", help="replication state of a group's nodes")
    common(q)
    q.add_argument("--broker-name", default=None)
    q.set_defaults(func=_signed(run_ha_status))

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
    q.set_defaults(func=_signed(run_promote))

    q = sub.add_parser("consumerProgress", help="per queue broker/consumer offsets of a group")
    common(q)
    q.add_argument("--group", required=True)
    q.add_argument("--topic", default=None, help="only this topic")
    q.set_defaults(func=_signed(run_consumer_progress))

    q = sub.add_parser("resetOffset", help="move a group's committed offset (recorded)")
    common(q)
    q.add_argument(
        "--broker-name", default=None, help="with --namesrv, when the topic spans groups"
    )
    q.add_argument("--group", required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--queue", type=int, required=True)
    q.add_argument("--offset", type=int, required=True)
    q.set_defaults(func=_signed(run_reset_offset))
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
