"""The demo's cluster: its workdir and embedded S3 server, a name server, a SYNC_MASTER and its
SLAVE as real processes on 127.0.0.1, and stopping them."""

from __future__ import annotations

import asyncio
import os
import shutil
import time

from tools.demo.base import BUCKET, CLUSTER, GROUP, MARKER, MASTER, SLAVE, Demo, DemoError
from tools.localcluster import free_port, start_broker, start_namesrv, write_broker_conf
from tools.s3server import DUMMY_CREDENTIALS, S3Server


def prepare(d: Demo) -> None:
    """The workdir (replaced only when an earlier demo made it), the S3 server and bucket."""
    if d.workdir.exists() and not d.workdir.is_dir():
        raise DemoError(f"--workdir {d.workdir} exists and is not a directory")
    if d.workdir.exists() and any(d.workdir.iterdir()):
        if not (d.workdir / MARKER).is_file():
            raise DemoError(
                f"--workdir {d.workdir} is not empty and was not made by haproof demo "
                f"(no {MARKER} file): refusing to delete it; give a new or empty directory"
            )
        shutil.rmtree(d.workdir)
    d.workdir.mkdir(parents=True, exist_ok=True)
    (d.workdir / MARKER).write_text("made by haproof demo: replaced by its next run\n")
    d.step(f"embedded S3 server and bucket {BUCKET} (workdir {d.workdir})")
    d.s3 = S3Server.start()
    d.s3.create_bucket(BUCKET)
    d.env = {**DUMMY_CREDENTIALS, "HAPROOF_S3_ENDPOINT": d.s3.endpoint_url}
    os.environ.update(d.env)
    d.say(f"  S3 endpoint {d.s3.endpoint_url}, archive root {d.root}")


def broker_conf(d: Demo, node: str, broker_id: int, role: str, **extra):
    """``node``'s broker.conf in the workdir: archiving on, short intervals."""
    port, ha_port = d.ports[node]
    props = {
        "brokerClusterName": CLUSTER,
        "brokerName": GROUP,
        "brokerId": broker_id,
        "brokerRole": role,
        "flushDiskType": "ASYNC_FLUSH",
        "storePathRootDir": d.workdir / f"store-{node}",
        "listenPort": port,
        "haListenPort": ha_port,
        "namesrvAddr": d.procs["namesrv"].addr,
        "nodeName": node,
        "mappedFileSizeCommitLog": 1024 * 1024,
        "flushConsumerOffsetInterval": 1000,
        "slaveSyncIntervalMs": 1000,
        "archiveEnable": "true",
        "archiveRoot": d.root,
        "archiveChunkMaxBytes": 256 * 1024,
        "archiveIntervalMs": 500,
        "snapshotIntervalMs": 1000,
        **extra,
    }
    return write_broker_conf(d.workdir / f"{node}.conf", props)


def start_node(d: Demo, node: str, broker_id: int, role: str, master: str | None = None) -> None:
    """Start ``node`` as a real broker process (a slave of ``master`` when given)."""
    extra = {"haMasterAddress": f"127.0.0.1:{d.ports[master][1]}"} if master else {}
    conf = broker_conf(d, node, broker_id, role, **extra)
    d.procs[node] = start_broker(node, conf, d.ports[node][0], d.workdir, d.env)


def start_group(d: Demo) -> None:
    d.step(f"name server, SYNC_MASTER {MASTER} and SLAVE {SLAVE}")
    d.procs["namesrv"] = start_namesrv(d.workdir, d.env)
    d.ports = {n: (free_port(), free_port()) for n in (MASTER, SLAVE)}
    start_node(d, MASTER, 0, "SYNC_MASTER")
    start_node(d, SLAVE, 1, "SLAVE", master=MASTER)
    for name in ("namesrv", MASTER, SLAVE):
        d.say(f"  {name} on {d.procs[name].addr} (log {d.procs[name].log_path})")
    wait_slave(d, d.procs[MASTER].addr)


def wait_slave(d: Demo, master_addr: str, timeout_s: float = 60.0) -> None:
    """Until the master sees a slave: a SYNC_MASTER answers SLAVE_NOT_AVAILABLE before."""
    from broker.admin import ha_status

    deadline = time.monotonic() + timeout_s
    while not asyncio.run(ha_status([master_addr]))[0].get("slaves"):
        if time.monotonic() > deadline:
            raise DemoError(f"no slave connected to {master_addr} within {timeout_s:.0f} s")
        time.sleep(0.1)
    d.say(f"  {master_addr} replicates to its slave again")


def stop_nodes(d: Demo) -> None:
    for name in (SLAVE, MASTER, "namesrv"):
        p = d.procs.get(name)
        if p is not None and p.alive():
            p.stop()
    d.say("  nodes stopped cleanly (SIGTERM: flushed and persisted)")


def cleanup(d: Demo) -> None:
    for p in d.procs.values():
        p.kill()
    if d.s3 is not None:
        d.s3.stop()
