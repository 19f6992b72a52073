"""mqadmin's consumerConnection against a real name server and broker process
(GET_CONSUMER_CONNECTION_LIST 203) with a live consumer, as a table and as ``--json`` valid
against docs/schemas/admin.schema.json."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from broker.acl.permission import request_resources
from broker.client.consumer import Consumer
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from tests.conftest import wait_until
from tests.support import schemas
from tests.support.cluster import node_conf
from tools.localcluster import free_port, start_broker, start_namesrv


def admin(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "broker.cli", "admin", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conns")
    ns = start_namesrv(tmp)
    procs = [ns]
    try:
        port = free_port()
        conf = node_conf(tmp, "m", 0, "ASYNC_MASTER", port, free_port(), ns.addr)
        procs.append(start_broker("m", conf, port, tmp))
        yield ns, procs[1]
    finally:
        for p in procs:
            p.kill()


def test_consumer_connection(cluster):
    ns, m = cluster
    assert admin("updateTopic", "-b", m.addr, "-t", "ConnT", "-r", "2", "-w", "2").returncode == 0
    wait_until(
        lambda: admin("topicClusterList", "-n", ns.addr, "-t", "ConnT").stdout == "C\n", 30, "route"
    )

    async def main():
        c = Consumer("ConnG", [ns.addr], "ConnT", client_id="conn-c1")
        try:
            await c.heartbeat()
            table = await asyncio.to_thread(
                admin, "consumerConnection", "-n", ns.addr, "-g", "ConnG"
            )
            res = await asyncio.to_thread(
                admin, "consumerConnection", "-b", m.addr, "-g", "ConnG", "--json"
            )
        finally:
            await c.close()
        return table, res

    table, res = asyncio.run(main())
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["#ClientId", "#ClientAddr", "#Broker"]
    assert lines[1].split()[0] == "conn-c1" and lines[1].split()[2] == m.addr
    assert "Below is subscription:" in lines
    assert any(line.split()[:2] == ["ConnT", "*"] for line in lines)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    schemas.validate(doc, "admin", "consumerConnection")
    assert [c["clientId"] for c in doc["connectionSet"]] == ["conn-c1"]
    assert doc["subscriptionTable"]["ConnT"] == {"topic": "ConnT", "subString": "*"}
    assert doc["errors"] == []

    # once the consumer is gone: not online
    wait_until(
        lambda: admin("consumerConnection", "-n", ns.addr, "-g", "ConnG").returncode == 1,
        30,
        "the consumer to leave",
    )
    res = admin("consumerConnection", "-n", ns.addr, "-g", "ConnG")
    assert "the consumer group[ConnG] not online" in res.stderr


def test_the_guard_checks_the_group():
    req = RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"})
    [res] = request_resources(req)
    assert (res.kind, res.name, res.source) == ("group", "G", "consumerGroup")
