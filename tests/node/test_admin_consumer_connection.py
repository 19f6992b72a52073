"""mqadmin's consumerConnection and producerConnection against a real name server and broker
process (GET_CONSUMER_CONNECTION_LIST 203, GET_PRODUCER_CONNECTION_LIST 204) with a live client,
as a table and as ``--json`` valid against docs/schemas/admin.schema.json."""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.acl.permission import request_resources
from broker.client.consumer import Consumer
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.conftest import wait_until
from tests.support import schemas
from tests.support.running import admin, admin_json, running_group


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_group(tmp_path_factory.mktemp("conns")) as g:
        yield g.ns, g.m


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


def test_producer_connection(cluster):
    ns, m = cluster
    heartbeat = {
        "clientID": "prod-1",
        "producerDataSet": [{"groupName": "ProdG"}],
        "consumerDataSet": [],
    }

    async def main():
        client = RemotingClient()
        try:
            req = RemotingCommand.request(
                RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode()
            )
            req.language, req.version = "PYTHON", 399  # what the heartbeat's header says
            assert (await client.invoke(m.addr, req, 5000)).code == ResponseCode.SUCCESS
            table = await asyncio.to_thread(
                admin, "producerConnection", "-n", ns.addr, "-g", "ProdG"
            )
            doc = await asyncio.to_thread(
                admin_json, "producerConnection", "-b", m.addr, "-g", "ProdG"
            )
        finally:
            await client.close()
        return table, doc

    table, doc = asyncio.run(main())
    assert table.returncode == 0, table.stderr
    [row] = table.stdout.splitlines()
    assert row.split()[:2] == ["0001", "prod-1"] and row.split()[3] == "PYTHON"
    [conn] = doc["connectionSet"]
    assert (conn["clientId"], conn["brokerAddr"], conn["language"], conn["version"]) == (
        "prod-1",
        m.addr,
        "PYTHON",
        399,
    )
    # its connection closed: the group is gone
    wait_until(
        lambda: admin("producerConnection", "-n", ns.addr, "-g", "ProdG").returncode == 1,
        30,
        "the producer to leave",
    )
    res = admin("producerConnection", "-n", ns.addr, "-g", "ProdG")
    assert "the producer group[ProdG] not exist" in res.stderr


def test_consumer_status(cluster):
    ns, m = cluster
    assert admin("updateTopic", "-b", m.addr, "-t", "StatusT", "-r", "2", "-w", "2").returncode == 0
    wait_until(
        lambda: admin("topicClusterList", "-n", ns.addr, "-t", "StatusT").stdout == "C\n",
        30,
        "route",
    )

    async def main():
        c = Consumer("StatusG", [ns.addr], "StatusT", client_id="status-c1")
        try:
            await c.heartbeat()
            await c.poll()  # rebalanced: its queues assigned
            doc = await asyncio.to_thread(
                admin_json, "consumerStatus", "-n", ns.addr, "-g", "StatusG"
            )
            table = await asyncio.to_thread(
                admin, "consumerStatus", "-b", m.addr, "-g", "StatusG", "-i", "status-c1"
            )
        finally:
            await c.close()
        return doc, table

    doc, table = asyncio.run(main())
    [client] = doc["clients"]
    info = client["runningInfo"]
    assert (client["clientId"], client["brokerAddr"]) == ("status-c1", m.addr)
    assert info["properties"]["consumerGroup"] == "StatusG"
    assert {"topic": "StatusT", "subString": "*"} in info["subscriptionSet"]
    assert sorted(q["queueId"] for q in info["mqTable"] if q["topic"] == "StatusT") == [0, 1]
    assert doc["sameSubscription"] is True and doc["errors"] == []
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:2] == ["001", "status-c1"]
    assert "Same subscription in the same group of consumer" in lines
    assert "#Consumer Offset#" in lines
    wait_until(
        lambda: admin("consumerStatus", "-n", ns.addr, "-g", "StatusG").returncode == 1,
        30,
        "the consumer to leave",
    )
