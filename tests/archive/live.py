"""Helpers for archive tests against live broker processes (not a test module)."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from broker.admin import ha_status
from broker.client.producer import Producer, SendStatus
from contracts import archive_layout as layout
from contracts.record.reader import scan_records
from tests.conftest import wait_until
from tools.localcluster import free_port, write_broker_conf

CLUSTER, GROUP = "C", "broker-a"
FILE_SIZE = 128 * 1024


# generous deadlines: the CI machine is shared
wait_for = functools.partial(wait_until, timeout_s=90.0, every_s=0.1)


def broker_conf(tmp_path: Path, node: str, port: int, namesrv: str, root: str, **extra) -> Path:
    props = {
        "brokerClusterName": CLUSTER,
        "brokerName": GROUP,
        "brokerId": 0,
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH",
        "flushIntervalCommitLog": 100,
        "flushCommitLogLeastPages": 0,
        "storePathRootDir": tmp_path / f"store-{node}",
        "listenPort": port,
        "haListenPort": free_port(),  # not listenPort + 1, which another process may hold
        "namesrvAddr": namesrv,
        "nodeName": node,
        "mappedFileSizeCommitLog": FILE_SIZE,
        "archiveEnable": "true",
        "archiveRoot": root,
        "archiveChunkMaxBytes": 64 * 1024,
        "archiveIntervalMs": 200,
        "snapshotIntervalMs": 500,
        **extra,
    }
    return write_broker_conf(tmp_path / f"{node}.conf", props)


async def _send(namesrv: str, n: int, tag: str) -> int:
    producer = Producer("PG-" + tag, [namesrv])
    ok = 0
    try:
        for i in range(n):
            res = await producer.send("ArchTopic", f"{tag} message {i} ".encode() * 10)
            assert res.status is SendStatus.SEND_OK, res
            ok += 1
    finally:
        await producer.close()
    return ok


def send(namesrv: str, n: int, tag: str = "m") -> int:
    return asyncio.run(_send(namesrv, n, tag))


def status(addr: str) -> dict:
    return asyncio.run(ha_status([addr]))[0]


def log_bytes(store_dir: Path) -> bytes:
    """The commit log's written bytes: files concatenated up to the end of the last record."""
    files = sorted((store_dir / "commitlog").iterdir())
    out = []
    for f in files:
        data = f.read_bytes()
        end = 0
        for rec in scan_records(data, with_body=False):
            end += rec.total_size
        out.append(data[:end])
        if end < len(data):
            break  # the written log ends in this file
    return b"".join(out)


def manifests(store, node: str) -> list[layout.ChunkManifest]:
    prefix = layout.node_prefix(CLUSTER, GROUP, node) + "commitlog/"
    mans = [
        layout.ChunkManifest.from_json(store.get(o.key), what=o.key)
        for o in store.list(prefix)
        if o.key.endswith(".json")
    ]
    return sorted(mans, key=lambda m: m.start)


def archived_end(store, node: str) -> int:
    mans = manifests(store, node)
    return mans[-1].end if mans else 0


def archived_bytes(store, node: str) -> bytes:
    """Every chunk's bytes in log order; asserts the chunks are contiguous from 0, no overlap."""
    mans = manifests(store, node)
    assert mans and mans[0].start == 0, [(m.start, m.end) for m in mans]
    for a, b in zip(mans, mans[1:], strict=False):
        assert a.end == b.start, f"chunks not contiguous: [{a.start},{a.end}) then [{b.start},..)"
    out = []
    for m in mans:
        data = store.get(layout.chunk_key(CLUSTER, GROUP, node, m.start, m.end, m.epoch))
        assert len(data) == m.end - m.start
        out.append(data)
    return b"".join(out)


def events(store, node: str) -> list[dict]:
    prefix = layout.node_prefix(CLUSTER, GROUP, node) + "events/"
    return [layout.parse_event(store.get(o.key), what=o.key) for o in store.list(prefix)]
