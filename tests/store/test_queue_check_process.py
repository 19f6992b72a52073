"""Issue 28 (consume queue damage) against a real ``haproof broker``: random bytes over queue 0's
consume queue entries while it is stopped; on restart the damage is logged, the queue rebuilt
from the commit log and a consumer pulls every message exactly once."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

from broker.remoting.client import RemotingClient
from broker.remoting.codes import ResponseCode
from contracts.record.reader import scan_records
from tests.acl.helpers import pull, send_v2
from tests.support.waiting import wait_for
from tools.localcluster import LocalProcess, free_port, start_broker, write_broker_conf

N = 40


def _start(tmp_path: Path, port: int) -> LocalProcess:
    conf = write_broker_conf(
        tmp_path / "broker.conf",
        {
            "brokerClusterName": "C",
            "brokerName": "broker-a",
            "brokerRole": "ASYNC_MASTER",
            "storePathRootDir": tmp_path / "store",
            "listenPort": port,
            "haListenPort": free_port(),
        },
    )
    return start_broker("broker", conf, port, tmp_path)


async def _send(addr: str) -> None:
    client = RemotingClient()
    try:
        for i in range(N):
            resp = await client.invoke(addr, send_v2("Q", f"b-{i:03d}".encode()), 10_000)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        await client.close()


async def _pull_all(addr: str) -> list[bytes]:
    client = RemotingClient()
    bodies: list[bytes] = []
    try:
        offset = 0

        async def pulled_to_the_end() -> bool:
            nonlocal offset, bodies
            resp = await client.invoke(addr, pull("Q", offset=offset), 10_000)
            if resp.code != ResponseCode.SUCCESS:  # an answer to retry, or the end
                return int(resp.ext_fields.get("maxOffset", -1)) == offset
            bodies += [r.body for r in scan_records(resp.body)]
            offset = int(resp.ext_fields["nextBeginOffset"])
            return False

        # every poll is a round trip to the broker: no pause between them
        await wait_for(pulled_to_the_end, 30_000, what="the consumer to reach the end", every_ms=0)
        return bodies
    finally:
        await client.close()


def test_a_damaged_consume_queue_is_rebuilt_by_a_real_broker(tmp_path):
    port = free_port()
    proc = _start(tmp_path, port)
    try:
        asyncio.run(_send(proc.addr))
        assert proc.stop() == 0
    finally:
        proc.kill()
    cq = tmp_path / "store" / "consumequeue" / "Q" / "0" / f"{0:020d}"
    rng = random.Random(28)
    with open(cq, "r+b") as fh:
        for entry in (0, 7, N - 1):
            fh.seek(entry * 20)
            fh.write(rng.randbytes(20))
    proc = _start(tmp_path, port)
    try:
        bodies = asyncio.run(_pull_all(proc.addr))
        assert bodies == [f"b-{i:03d}".encode() for i in range(N)]
        log = proc.log_path.read_text()
        assert "consume queue Q/0" in log and "rebuilt from the commit log" in log, log[-3000:]
        assert os.path.getsize(cq) > 0
    finally:
        proc.stop()
