"""``haproof bench topics``: the cost of auto-creating many topics, one JSON line.

Starts a name server and a master as real processes on 127.0.0.1 in a temporary directory (the
code under ``--source``, default this checkout: a run against another checkout compares
before/after), sends one message to each of ``--topics`` new topics (each auto-created from
TBW102, as a RocketMQ client's first send does), waits until the name server routes the last
one, and reports the CPU seconds of the broker and of the name server, and the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from contracts.errors import HaproofError
from tools.localcluster import (
    free_port,
    process_cpu_s,
    start_broker,
    start_namesrv,
    write_broker_conf,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("topics", help="CPU of auto-creating many topics (broker, namesrv)")
    p.add_argument("--topics", type=int, default=5000, help="topics to auto-create")
    p.add_argument("--senders", type=int, default=4, help="concurrent senders")
    p.add_argument(
        "--one-topic",
        action="store_true",
        help="the same sends to one topic (the baseline: the cost of the sends themselves)",
    )
    p.add_argument(
        "--source", default=None, help="run the nodes from this checkout (default: this one)"
    )
    p.set_defaults(func=run)


async def _route_of(client, ns_addr: str, topic: str) -> bool:
    from broker.remoting.codes import RequestCode, ResponseCode
    from broker.remoting.command import RemotingCommand

    req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return (await client.invoke(ns_addr, req, 5000)).code == ResponseCode.SUCCESS


async def _create(
    ns_addr: str, topics: int, senders: int, one_topic: bool, timeout_s: float = 1800
) -> float:
    """Send to each new topic; the seconds until the name server routed them all."""
    from broker.client.producer import Producer, SendStatus
    from broker.remoting.client import RemotingClient

    client = RemotingClient()
    deadline = time.monotonic() + timeout_s
    while not await _route_of(client, ns_addr, "TBW102"):
        if time.monotonic() > deadline:
            raise HaproofError("bench topics: the broker never registered TBW102")
        await asyncio.sleep(0.05)
    started = time.monotonic()
    names = ["BenchAuto0" if one_topic else f"BenchAuto{i}" for i in range(topics)]

    async def sender(k: int) -> None:
        producer = Producer(f"bench-topics-{k}", [ns_addr])
        try:
            for name in names[k::senders]:
                result = await producer.send(name, b"x")
                if result.status != SendStatus.SEND_OK:
                    raise HaproofError(f"bench topics: send to {name}: {result.status}")
        finally:
            await producer.close()

    await asyncio.gather(*(sender(k) for k in range(senders)))
    try:
        for name in dict.fromkeys(names[::-1]):
            while not await _route_of(client, ns_addr, name):
                if time.monotonic() > deadline:
                    raise HaproofError(f"bench topics: {name} was never routed")
                await asyncio.sleep(0.05)
    finally:
        await client.close()
    return time.monotonic() - started


def run(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="haproof-bench-topics-"))
    env = {"PYTHONPATH": os.path.abspath(args.source)} if args.source else None
    procs = []
    try:
        namesrv = start_namesrv(workdir, env, log_level="WARNING")
        procs.append(namesrv)
        port = free_port()
        conf = write_broker_conf(
            workdir / "broker.conf",
            {
                "brokerName": "bench-a",
                "brokerRole": "ASYNC_MASTER",
                "storePathRootDir": workdir / "store",
                "listenPort": port,
                "namesrvAddr": namesrv.addr,
                "autoCreateTopicMaxPerClient": args.topics + 1,
                "mappedFileSizeCommitLog": 64 * 1024 * 1024,
            },
        )
        broker = start_broker("broker", conf, port, workdir, env, log_level="WARNING")
        procs.append(broker)
        cpu0 = {p.name: process_cpu_s(p.proc.pid) for p in procs}
        wall_s = asyncio.run(_create(namesrv.addr, args.topics, args.senders, args.one_topic))
        cpu = {p.name: round(process_cpu_s(p.proc.pid) - cpu0[p.name], 2) for p in procs}
    finally:
        for p in procs:
            p.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        json.dumps(
            {
                "topics": 1 if args.one_topic else args.topics,
                "sends": args.topics,
                "source": os.path.abspath(args.source or Path(__file__).parents[2]),
                "wall_s": round(wall_s, 1),
                "broker_cpu_s": cpu["broker"],
                "namesrv_cpu_s": cpu["namesrv"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tools.bench.topics")
    register(parser.add_subparsers(required=True))
    ns = parser.parse_args()
    raise SystemExit(ns.func(ns))
