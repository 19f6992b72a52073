"""The demo's cluster: its workdir and embedded S3 server, a controller (RocketMQ 5's controller
mode, shipping its election records to the archive), a name server, and the group's two nodes in
controller mode as real processes on 127.0.0.1, and stopping them. The controller decides the
roles: ``broker-a-0`` starts first and is elected master, ``broker-a-1`` then joins as its
slave. The heartbeat, lease and scan settings are the ones ``haproof bench failover`` measures
(``tools/bench/failover_group.py`` ``Settings``)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time

from tools.bench.failover_group import Settings
from tools.controller_group import replica_info_of
from tools.demo.base import BUCKET, CLUSTER, GROUP, MARKER, MASTER, SLAVE, Demo, DemoError
from tools.localcluster import (
    free_port,
    start_broker,
    start_controller,
    start_namesrv,
    write_broker_conf,
)
from tools.s3server import DUMMY_CREDENTIALS, S3Server

FAST = Settings()  # the failover settings the benchmark measured (docs/controller.md)


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


def broker_conf(d: Demo, node: str, **extra):
    """``node``'s broker.conf in the workdir: controller mode (the controller decides the
    role; a master is a SYNC_MASTER), archiving on, short intervals."""
    port, ha_port = d.ports[node]
    props = {
        "brokerClusterName": CLUSTER,
        "brokerName": GROUP,
        "brokerRole": "SYNC_MASTER",
        "enableControllerMode": "true",
        "controllerAddr": d.procs["controller"].addr,
        **FAST.broker_keys(),
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


def start_node(d: Demo, node: str) -> None:
    """Start ``node`` as a real broker process in controller mode."""
    conf = broker_conf(d, node)
    d.procs[node] = start_broker(node, conf, d.ports[node][0], d.workdir, d.env)


def start_group(d: Demo) -> None:
    d.step(f"controller, name server, {MASTER} and {SLAVE} in controller mode")
    d.procs["controller"] = start_controller(
        d.workdir,
        {
            **FAST.controller_keys(),
            "archiveEnable": "true",
            "archiveRoot": d.root,
            "archiveIntervalMs": 500,
        },
        d.env,
    )
    d.procs["namesrv"] = start_namesrv(d.workdir, d.env)
    d.ports = {n: (free_port(), free_port()) for n in (MASTER, SLAVE)}
    start_node(d, MASTER)
    addr, epoch = wait_elected(d, 0)
    start_node(d, SLAVE)
    for name in ("controller", "namesrv", MASTER, SLAVE):
        d.say(f"  {name} on {d.procs[name].addr} (log {d.procs[name].log_path})")
    d.say(f"  the controller elected {node_at(d, addr)}: master of {GROUP} under epoch {epoch}")
    wait_slave(d, d.procs[MASTER].addr)


def node_at(d: Demo, addr: str) -> str:
    return next((n for n in (MASTER, SLAVE) if d.procs[n].addr == addr), addr)


def wait_elected(d: Demo, after_epoch: int, timeout_s: float = 60.0) -> tuple[str, int]:
    """Until the controller names a master of the group under an epoch above
    ``after_epoch`` (CONTROLLER_GET_REPLICA_INFO): (its address, the epoch)."""
    deadline = time.monotonic() + timeout_s
    while True:
        addr, epoch, _ = asyncio.run(_ask_master(d.procs["controller"].addr))
        if addr and epoch > after_epoch:
            return addr, epoch
        if time.monotonic() > deadline:
            raise DemoError(f"the controller elected no master within {timeout_s:.0f} s")
        time.sleep(0.05)


def wait_slave(d: Demo, master_addr: str, timeout_s: float = 60.0) -> None:
    """Until the master has an in-sync slave and the controller counts it in the SyncStateSet:
    a SYNC_MASTER answers SLAVE_NOT_AVAILABLE before, and only a member can be elected."""
    from broker.admin import ha_status

    def ready() -> bool:
        slaves = asyncio.run(ha_status([master_addr]))[0].get("slaves") or []
        if not any(s.get("inSync") for s in slaves):
            return False
        body = asyncio.run(_ask_master(d.procs["controller"].addr))[2]
        return len(body.get("syncStateSet") or []) >= 2

    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise DemoError(f"no slave in sync with {master_addr} within {timeout_s:.0f} s")
        time.sleep(0.1)
    d.say(f"  {master_addr} replicates to its slave, a member of its SyncStateSet")


async def _ask_master(controller: str) -> tuple[str | None, int, dict]:
    from broker.remoting.client import RemotingClient

    client = RemotingClient()
    try:
        return await replica_info_of(client, controller, GROUP)
    finally:
        await client.close()


def stop_nodes(d: Demo) -> None:
    """The controller first (stopping the master must not make it elect again), then the
    nodes and the name server."""
    for name in ("controller", SLAVE, MASTER, "namesrv"):
        p = d.procs.get(name)
        if p is not None and p.alive():
            p.stop()
    d.say("  nodes stopped cleanly (SIGTERM: flushed and persisted)")


def cleanup(d: Demo) -> None:
    for p in d.procs.values():
        p.kill()
    if d.s3 is not None:
        d.s3.stop()
