"""mqadmin's queryMsgById against a real name server and broker process (VIEW_MESSAGE_BY_ID 33),
as a table and as ``--json`` valid against docs/schemas/admin.schema.json; the broker answers
only a record of the topic the guard checked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from broker.acl.permission import request_resources
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from tests.conftest import wait_until
from tests.support import schemas
from tests.support.cluster import node_conf
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "ByIdTopic"


def admin(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "broker.cli", "admin", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def admin_json(*args: str):
    res = admin(*args, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    schemas.validate(doc, "admin", args[0])
    return doc


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("byid")
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


def test_query_msg_by_id(cluster):
    ns, m = cluster
    for topic in (TOPIC, "OtherTopic"):
        assert admin("updateTopic", "-b", m.addr, "-t", topic, "-r", "2", "-w", "2").returncode == 0
    wait_until(
        lambda: admin("topicClusterList", "-n", ns.addr, "-t", TOPIC).stdout == "C\n", 30, "route"
    )
    sent = [
        admin_json("sendMessage", "-n", ns.addr, "-t", TOPIC, "-p", f"by id {i}", "-k", f"k{i}")
        for i in range(3)
    ]
    for i, s in enumerate(sent):
        doc = admin_json("queryMsgById", "-n", ns.addr, "-t", TOPIC, "-i", s["offsetMsgId"])
        assert (doc["body"], doc["msgId"], doc["brokerAddr"]) == (
            f"by id {i}",
            s["offsetMsgId"],
            m.addr,
        )
        assert doc["brokerName"] == "broker-a" and doc["properties"]["KEYS"] == f"k{i}"
    text = admin("queryMsgById", "-t", TOPIC, "-i", sent[1]["offsetMsgId"]).stdout
    assert f"OffsetID:            {sent[1]['offsetMsgId']}" in text
    assert "Message Body:        by id 1" in text and f"Broker Name:         {m.addr}" in text

    # another topic's name, or an offset that is no record start: not found
    res = admin("queryMsgById", "-t", "OtherTopic", "-i", sent[0]["offsetMsgId"])
    assert res.returncode == 1 and "can not find message by the offset" in res.stderr
    inside = sent[0]["offsetMsgId"][:-1] + ("1" if sent[0]["offsetMsgId"][-1] != "1" else "2")
    res = admin("queryMsgById", "-t", TOPIC, "-i", inside)
    assert res.returncode == 1 and "can not find message by the offset" in res.stderr
    res = admin("queryMsgById", "-t", TOPIC, "-i", "XYZ")
    assert res.returncode == 2 and "not an offset msgId" in res.stderr


def test_the_guard_checks_the_topic_the_handler_compares():
    req = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"topic": "T", "offset": 0})
    [res] = request_resources(req)
    assert (res.kind, res.name, res.source) == ("topic", "T", "topic")
