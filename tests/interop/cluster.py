"""One name server and one master broker as real processes on 127.0.0.1, for the client
interoperability tests; plus the broker-side facts those tests check (committed offsets)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tools.localcluster import (
    LocalProcess,
    free_port,
    start_broker,
    start_namesrv,
    write_broker_conf,
)


@contextlib.contextmanager
def single_broker(tmp_path: Path, **extra) -> Iterator[tuple[LocalProcess, LocalProcess]]:
    """(name server, broker-a master); both stopped with SIGTERM at the end."""
    ns = start_namesrv(tmp_path)
    procs = [ns]
    try:
        port = free_port()
        conf = write_broker_conf(
            tmp_path / "broker-a.conf",
            {
                "brokerClusterName": "DefaultCluster",
                "brokerName": "broker-a",
                "brokerId": 0,
                "brokerRole": "ASYNC_MASTER",
                "flushDiskType": "ASYNC_FLUSH",
                "storePathRootDir": tmp_path / "store-a",
                "listenPort": port,
                "haListenPort": free_port(),
                "namesrvAddr": ns.addr,
                "mappedFileSizeCommitLog": 4 * 1024 * 1024,
                "autoCreateTopicEnable": "true",
                **extra,
            },
        )
        broker = start_broker("broker-a", conf, port, tmp_path)
        procs.append(broker)
        yield ns, broker
        assert broker.stop() == 0, f"broker exit code; log {broker.log_path}"
    finally:
        for p in reversed(procs):
            p.kill()


def committed_offsets(broker_addr: str, group: str, topic: str, queues: int) -> dict[int, int]:
    """QUERY_CONSUMER_OFFSET for every queue (-1 when the broker has none)."""

    async def main() -> dict[int, int]:
        client = RemotingClient()
        out = {}
        try:
            for qid in range(queues):
                req = RemotingCommand.request(
                    RequestCode.QUERY_CONSUMER_OFFSET,
                    {"consumerGroup": group, "topic": topic, "queueId": qid},
                )
                resp = await client.invoke(broker_addr, req, 5000)
                out[qid] = resp.int_field("offset") if resp.code == ResponseCode.SUCCESS else -1
        finally:
            await client.close()
        return out

    return asyncio.run(main())
