"""mqadmin's queryMsgById against a real name server and broker process (VIEW_MESSAGE_BY_ID 33),
as a table and as ``--json`` valid against docs/schemas/admin.schema.json; the broker answers
only a record of the topic the guard checked."""

from __future__ import annotations

import pytest

from broker.acl.permission import request_resources
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from tests.conftest import wait_until
from tests.support.running import admin, admin_json, running_group

TOPIC = "ByIdTopic"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_group(tmp_path_factory.mktemp("byid")) as g:
        yield g.ns, g.m


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
