"""The master's SyncStateSet with real processes on 127.0.0.1: a controller and three nodes in
controller mode with ``allAckInSyncStateSet=true``, ``minInSyncReplicas=2`` and a short
``haMaxTimeSlaveNotCatchup``. A SIGSTOPped slave leaves the set once it has not caught up for
that long, and sends succeed again without it; the other slave killed, the master alone is
refused with RocketMQ's answer (SYSTEM_ERROR, "in-sync replicas not enough"); the stopped
slave resumes, catches up, returns to the set and sends succeed. Every change the master
applied is an archived ``sync_state_set_changed`` event."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import signal
import time

from broker.admin.cluster import _in_set, cluster_list
from broker.admin.ha import ha_status, print_ha_status
from broker.client.producer import Producer, SendStatus
from tests.support import schemas
from tests.support.controller_cluster import ControllerCluster
from tests.support.waiting import wait_for

TOPIC = "SyncStateSetTopic"
NOT_CATCHUP_MS = 1500


def test_a_stopped_slave_leaves_the_set_and_returns(tmp_path):
    asyncio.run(_scenario(tmp_path, tmp_path / "archive"))


async def _scenario(tmp_path, archive) -> None:
    cluster = await ControllerCluster.start(
        tmp_path,
        flushDiskType="ASYNC_FLUSH",
        haSendHeartbeatInterval=200,
        allAckInSyncStateSet="true",
        minInSyncReplicas=2,
        haMaxTimeSlaveNotCatchup=NOT_CATCHUP_MS,
        syncFlushTimeout=8000,
        archiveEnable="true",
        archiveRoot=f"file://{archive}",
        archiveInProcess="true",
        archiveIntervalMs=300,
    )
    namesrv = cluster.ns.addr
    producer = Producer("PG", [namesrv], retry_times=0)
    try:
        master, _ = await cluster.wait_master(timeout_ms=30_000)
        m_node = cluster.node_at(master).name
        ids = await wait_for(
            lambda: _set_of(cluster, master, size=3), 30_000, what="both slaves in the set"
        )
        assert await _send(producer, "all-three") is SendStatus.SEND_OK
        stopped, killed = [n for n in cluster.nodes if n != m_node]
        cluster.nodes[stopped].proc.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        load = asyncio.ensure_future(_keep_sending(producer))  # data it never acks
        two = await wait_for(lambda: _set_of(cluster, master, size=2), 15_000, what="it leaves")
        left_after_s = time.monotonic() - t0
        # it was last caught up at most one HA heartbeat (200 ms) before the stop
        assert NOT_CATCHUP_MS / 1000 - 0.3 <= left_after_s < 8, left_after_s
        print(f"SIGSTOPped slave left the SyncStateSet {left_after_s:.2f} s after the stop")
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
        assert len(two) == 2 and set(two) < set(ids)
        assert await _send(producer, "without-the-stopped") is SendStatus.SEND_OK
        cluster.kill(killed)  # -9: its connection closes, it leaves at once
        await wait_for(lambda: _set_of(cluster, master, size=1), 15_000, what="master alone")
        refused = await _send(producer, "alone")
        assert isinstance(refused, str) and "code 1 " in refused, refused  # SYSTEM_ERROR
        assert "in-sync replicas not enough" in refused, refused
        cluster.nodes[stopped].proc.proc.send_signal(signal.SIGCONT)
        t1 = time.monotonic()
        await wait_for(lambda: _set_of(cluster, master, size=2), 15_000, what="it returns")
        print(f"resumed slave back in the SyncStateSet after {time.monotonic() - t1:.2f} s")
        sent = await wait_for(lambda: _sent_ok(producer), 10_000, what="a send acknowledged")
        assert sent is SendStatus.SEND_OK
        await _admin_shows_the_set(namesrv, master)
        kinds = await wait_for(
            lambda: _archived_changes(archive, m_node, 3), 10_000, what="changes archived"
        )
        assert [len(k["memberIds"]) for k in kinds[-3:]] == [2, 1, 2], kinds
        assert m_node in kinds[-1]["members"] and stopped in kinds[-1]["members"], kinds[-1]
    finally:
        await producer.close()
        await cluster.close()


async def _admin_shows_the_set(namesrv: str, master: str) -> None:
    """clusterList and haStatus show SyncStateSet membership."""
    doc = await cluster_list([namesrv])
    table = next(b["table"] for b in doc["brokers"] if b["brokerAddr"] == master)
    members = table["controllerSyncStateSet"]
    assert table["inSyncStateSet"] == "True" and len(members.split(",")) == 2
    assert _in_set(table) == f"yes [{members}]"
    rows = await ha_status([master])
    schemas.validate(rows, "admin", "haStatus")  # docs/schemas/admin.schema.json
    row = rows[0]
    assert len(row["syncStateSet"]) == 2
    members = [s for s in row["slaves"] if s["inSyncStateSet"]]
    assert len(members) == 1 and members[0]["brokerId"] in row["syncStateSet"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_ha_status(rows)
    assert (
        f"SyncStateSet {row['syncStateSet']} (epoch {row['syncStateSetEpoch']})" in out.getvalue()
    )


async def _set_of(cluster: ControllerCluster, addr: str, size: int) -> list[int] | None:
    """The master's SyncStateSet (haStatus) when it has ``size`` members and none in flight."""
    doc = await cluster.status(addr) or {}
    members = doc.get("syncStateSet")
    if members is None or len(members) != size or doc.get("syncStateSetProposed"):
        return None
    return members


async def _send(producer: Producer, label: str):
    """SendStatus, or the refusal's text."""
    try:
        return (await producer.send(TOPIC, label.encode() * 10, keys=label)).status
    except Exception as exc:  # noqa: BLE001 - the refusal is what some steps expect
        return str(exc)


async def _sent_ok(producer: Producer):
    status = await _send(producer, "back")
    return status if status is SendStatus.SEND_OK else None


async def _keep_sending(producer: Producer) -> None:
    while True:
        await _send(producer, "load")
        await asyncio.sleep(0.05)


async def _archived_changes(archive, node: str, at_least: int) -> list[dict] | None:
    files = (archive / "v1").rglob("*-sync_state_set_changed.json")
    docs = [json.loads(f.read_text()) for f in files if node in f.parts]
    docs.sort(key=lambda d: d["at"])
    return docs if len(docs) >= at_least else None
