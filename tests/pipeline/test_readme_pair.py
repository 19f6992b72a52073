"""The README's "Audit your own master/slave pair", step by step, on a live pair: a name server,
a SYNC_MASTER and its SLAVE as processes, one ``haproof archive --follow`` per node's store
directory (``--broker-id``/``--role`` as in its broker.conf), then ``haproof audit`` configured
by the ``HAPROOF_*`` variables alone. The slave's bytes are compared with the master's."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

from broker.admin import ha_status
from broker.client.producer import Producer, SendStatus
from contracts import archive_layout as layout
from contracts.object_store import open_store
from tests.conftest import wait_until
from tests.support.cluster import node_conf
from tests.support.haproof_cli import audit_json
from tools.localcluster import free_port, start_broker, start_namesrv


async def _send(namesrv: str, n: int) -> None:
    producer = Producer("PG", [namesrv], retry_times=1)
    try:
        for i in range(n):
            res = await producer.send("ReadmeTopic", f"message {i:04d}".encode() * 8)
            assert res.status is SendStatus.SEND_OK
    finally:
        await producer.close()


def _follow(store_dir, root: str, node: str, broker_id: int, role: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "archive",
            "--follow",
            "--interval-ms",
            "200",
            "--store-dir",
            str(store_dir),
            "--root",
            root,
            "--cluster",
            "DefaultCluster",
            "--broker-name",
            "broker-a",
            "--node",
            node,
            "--broker-id",
            str(broker_id),
            "--role",
            role,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _archived_end(store, node: str) -> int:
    prefix = layout.node_prefix("DefaultCluster", "broker-a", node) + "commitlog/"
    ends = [p.end for o in store.list(prefix) if (p := layout.parse_key(o.key)) and p.end]
    return max(ends, default=0)


def test_the_readme_steps_audit_a_live_pair(tmp_path):
    ns = start_namesrv(tmp_path)
    procs = [ns]
    root = f"file://{tmp_path}/archive"
    followers: list[subprocess.Popen] = []
    try:
        (m_port, m_ha), s_port = (free_port(), free_port()), free_port()
        m = start_broker(
            "m",
            node_conf(
                tmp_path,
                "m",
                0,
                "SYNC_MASTER",
                m_port,
                m_ha,
                ns.addr,
                brokerClusterName="DefaultCluster",
            ),
            m_port,
            tmp_path,
        )
        procs.append(m)
        s_conf = node_conf(
            tmp_path,
            "s",
            1,
            "SLAVE",
            s_port,
            free_port(),
            ns.addr,
            brokerClusterName="DefaultCluster",
            haMasterAddress=f"127.0.0.1:{m_ha}",
        )
        procs.append(start_broker("s", s_conf, s_port, tmp_path))
        wait_until(lambda: asyncio.run(ha_status([m.addr]))[0].get("slaves"), 60, "the slave")
        asyncio.run(_send(ns.addr, 60))
        top = asyncio.run(ha_status([m.addr]))[0]["maxOffset"]

        # step 1: one archive --follow per node, beside the running brokers
        followers += [
            _follow(tmp_path / "store-m", root, "broker-a-0", 0, "SYNC_MASTER"),
            _follow(tmp_path / "store-s", root, "broker-a-1", 1, "SLAVE"),
        ]
        store = open_store(root)
        wait_until(
            lambda: min(_archived_end(store, n) for n in ("broker-a-0", "broker-a-1")) >= top,
            120,
            "both nodes archived up to the master's end",
            every_s=0.2,
        )
        for f in followers:
            f.send_signal(signal.SIGTERM)
        for f in followers:
            out, err = f.communicate(timeout=60)
            assert f.returncode in (0, -signal.SIGTERM), err

        # step 3: the audit, configured by the environment alone
        env = {"HAPROOF_ARCHIVE_ROOT": root, "HAPROOF_CLUSTER": "DefaultCluster"}
        (group,) = audit_json("--no-expectations", env=env)["groups"]
        checks = {c["name"]: c for c in group["checks"]}
        replica = checks["replica_consistency"]
        assert replica["status"] == "pass" and replica["evidence"] >= top, replica
        assert checks["log_integrity"]["status"] == "pass"
        assert group["ranges"]["match"]["bytes"] >= top
    finally:
        for f in followers:
            if f.poll() is None:
                f.kill()
        for p in procs:
            p.kill()
