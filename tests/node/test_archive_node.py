"""Archiving inside live broker processes (archiveEnable) to the embedded S3 server."""

from __future__ import annotations

import asyncio
import functools
import json
import uuid

from broker.admin import ha_status
from broker.client.producer import Producer, SendStatus
from contracts import archive_layout as layout
from contracts.object_store import open_store
from tests.conftest import wait_until
from tests.support.cluster import node_conf
from tools.localcluster import free_port, start_broker, start_namesrv
from tools.s3server import DUMMY_CREDENTIALS

# A shared machine: generous deadlines.
_wait = functools.partial(wait_until, timeout_s=60.0)


def _conf(tmp_path, node, broker_id, role, port, ha_port, namesrv, root, endpoint, **extra):
    return node_conf(
        tmp_path,
        node,
        broker_id,
        role,
        port,
        ha_port,
        namesrv,
        flushDiskType="ASYNC_FLUSH",
        flushIntervalCommitLog=100,
        flushCommitLogLeastPages=0,
        mappedFileSizeCommitLog=128 * 1024,
        archiveEnable="true",
        archiveRoot=root,
        archiveS3Endpoint=endpoint,
        archiveChunkMaxBytes=64 * 1024,
        archiveIntervalMs=200,
        snapshotIntervalMs=300,
        **extra,
    )


async def _send(namesrv, n):
    producer = Producer("PG", [namesrv])
    try:
        for i in range(n):
            res = await producer.send("ArchTopic", f"archived message {i} ".encode() * 10)
            assert res.status is SendStatus.SEND_OK
    finally:
        await producer.close()


def test_master_and_slave_ship_their_logs_snapshots_and_events(tmp_path, s3_server):
    bucket = "arch-" + uuid.uuid4().hex[:8]
    s3_server.create_bucket(bucket)
    root = f"s3://{bucket}/x"
    env = dict(DUMMY_CREDENTIALS)
    ns = start_namesrv(tmp_path)
    procs = [ns]
    try:
        (a_port, a_ha), (b_port, b_ha) = (free_port(), free_port()), (free_port(), free_port())
        ep = s3_server.endpoint_url
        procs.append(
            start_broker(
                "a",
                _conf(tmp_path, "a", 0, "SYNC_MASTER", a_port, a_ha, ns.addr, root, ep),
                a_port,
                tmp_path,
                env,
            )
        )
        procs.append(
            start_broker(
                "b",
                _conf(
                    tmp_path,
                    "b",
                    1,
                    "SLAVE",
                    b_port,
                    b_ha,
                    ns.addr,
                    root,
                    ep,
                    haMasterAddress=f"127.0.0.1:{a_ha}",
                ),
                b_port,
                tmp_path,
                env,
            )
        )
        _wait(lambda: asyncio.run(ha_status([procs[1].addr]))[0].get("slaves"), what="b connected")
        asyncio.run(_send(ns.addr, 600))  # ~ 130 KB: two commit log files
        store = open_store(
            root,
            endpoint_url=ep,
            **{"access_key": env["AWS_ACCESS_KEY_ID"], "secret_key": env["AWS_SECRET_ACCESS_KEY"]},
        )

        def chunks(node):
            prefix = layout.node_prefix("C", "broker-a", node) + "commitlog/"
            mans = [
                layout.ChunkManifest.from_json(store.get(o.key))
                for o in store.list(prefix)
                if o.key.endswith(".json")
            ]
            return sorted(mans, key=lambda m: m.start)

        def log_bytes(node):
            files = sorted((tmp_path / f"store-{node}" / "commitlog").iterdir())
            return b"".join(f.read_bytes() for f in files).rstrip(b"\0")

        for node in ("a", "b"):
            want = len(log_bytes("a"))
            _wait(
                lambda n=node, w=want: chunks(n) and chunks(n)[-1].end >= w, what=f"{node} shipped"
            )
            mans = chunks(node)
            assert mans[0].start == 0
            assert all(x.end == y.start for x, y in zip(mans, mans[1:], strict=False))
            shipped = b"".join(
                store.get(layout.chunk_key("C", "broker-a", node, m.start, m.end, m.epoch))
                for m in mans
            )
            assert shipped == log_bytes("a")[: len(shipped)]  # the slave's log is the master's
            assert {m.epoch for m in mans} == {1} and all(
                m.mappedFileSize == 128 * 1024 for m in mans
            )
        assert {m.role for m in chunks("a")} == {"SYNC_MASTER"}
        assert {m.role for m in chunks("b")} == {"SLAVE"}

        def master_snapshot_with_slave():
            keys = [
                o.key for o in store.list(layout.node_prefix("C", "broker-a", "a") + "snapshots/")
            ]
            for key in reversed(keys):
                snap = layout.Snapshot.from_json(store.get(key))
                if snap.slaves.get("b", 0) >= len(log_bytes("a")):
                    return snap
            return None

        snap = _wait(master_snapshot_with_slave, what="a master snapshot acknowledging b")
        assert snap.role == "SYNC_MASTER" and snap.epoch == 1 and snap.brokerId == 0
        assert snap.confirmOffset <= snap.maxPhyOffset
        assert sum(int(v) for v in snap.queueMaxOffsets["ArchTopic"].values()) == 600
        events = [o.key for o in store.list(layout.node_prefix("C", "broker-a", "a") + "events/")]
        assert any(k.endswith("-started.json") for k in events)
        started = json.loads(store.get(next(k for k in events if k.endswith("-started.json"))))
        assert started["node"] == "a" and started["epoch"] == 1
        for p in procs[1:]:
            assert p.stop() == 0
        # Credentials never reach the logs.
        for node in ("a", "b"):
            text = (tmp_path / f"{node}.log").read_text()
            assert env["AWS_SECRET_ACCESS_KEY"] not in text
    finally:
        for p in procs:
            p.kill()
