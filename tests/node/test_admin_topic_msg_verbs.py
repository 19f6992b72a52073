"""mqadmin's topic and message verbs against a real name server and broker process:
updateTopic, topicList, topicClusterList, sendMessage, queryMsgByOffset, printMsg,
consumeMessage, queryMsgByKey, each as a table (mqadmin's shape) and as ``--json`` valid
against docs/schemas/admin.schema.json."""

from __future__ import annotations

import pytest

from tests.conftest import wait_until
from tests.support.running import admin, admin_json, running_group

TOPIC = "MqadminTopic"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_group(tmp_path_factory.mktemp("mqadmin"), autoCreateTopicEnable="false") as g:
        yield g.ns, g.m


def test_topic_and_message_verbs(cluster):
    ns, m = cluster
    # updateTopic on every master of the cluster, then the name server routes it
    res = admin("updateTopic", "-n", ns.addr, "-c", "C", "-t", TOPIC, "-r", "2", "-w", "2")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == f"create topic to {m.addr} success."
    assert "readQueueNums=2, writeQueueNums=2, perm=RW" in res.stdout
    rows = admin_json("updateTopic", "-b", m.addr, "-t", TOPIC, "-r", "2", "-w", "2")
    assert rows == [{"brokerAddr": m.addr, "topicConfig": rows[0]["topicConfig"]}]
    wait_until(
        lambda: admin("topicClusterList", "-n", ns.addr, "-t", TOPIC).stdout == "C\n",
        30,
        "the topic's route",
    )
    assert admin_json("topicClusterList", "-n", ns.addr, "-t", TOPIC)["clusterList"] == ["C"]
    assert TOPIC in admin("topicList", "-n", ns.addr).stdout.splitlines()
    assert TOPIC in admin_json("topicList", "-n", ns.addr)["topicList"]

    # sendMessage, then read it back three ways
    sent = [
        admin_json(
            "sendMessage",
            "-n",
            ns.addr,
            "-t",
            TOPIC,
            "-p",
            f"hello {i}",
            "-c",
            "TagA",
            "-k",
            f"k{i}",
        )
        for i in range(4)
    ]
    assert all(s["sendResult"] == "SEND_OK" and s["brokerName"] == "broker-a" for s in sent)
    table = admin("sendMessage", "-n", ns.addr, "-t", TOPIC, "-p", "hello 4")
    assert table.stdout.split()[:4] == ["#Broker", "Name", "#QID", "#Send"]
    s0 = sent[0]
    msg = admin_json(
        "queryMsgByOffset",
        "-n",
        ns.addr,
        "-t",
        TOPIC,
        "-b",
        "broker-a",
        "-i",
        str(s0["queueId"]),
        "-o",
        str(s0["queueOffset"]),
    )
    assert (msg["body"], msg["properties"]["TAGS"], msg["properties"]["KEYS"]) == (
        "hello 0",
        "TagA",
        "k0",
    )
    assert msg["properties"]["UNIQ_KEY"] == s0["msgId"] and msg["msgId"] == s0["offsetMsgId"]
    text = admin(
        "queryMsgByOffset",
        "-n",
        ns.addr,
        "-t",
        TOPIC,
        "-b",
        "broker-a",
        "-i",
        str(s0["queueId"]),
        "-o",
        str(s0["queueOffset"]),
    ).stdout
    assert (
        f"OffsetID:            {s0['offsetMsgId']}" in text
        and "Message Body:        hello 0" in text
    )
    every = admin_json("printMsg", "-n", ns.addr, "-t", TOPIC)
    assert sorted(r["body"] for r in every) == [f"hello {i}" for i in range(5)]
    lines = admin("printMsg", "-n", ns.addr, "-t", TOPIC).stdout.splitlines()
    assert len(lines) == 5 and all(
        line.startswith("MSGID: ") and " BODY: hello " in line for line in lines
    )
    q = s0["queueId"]
    some = admin_json(
        "consumeMessage",
        "-n",
        ns.addr,
        "-t",
        TOPIC,
        "-b",
        "broker-a",
        "-i",
        str(q),
        "-o",
        str(s0["queueOffset"]),
        "-c",
        "1",
    )
    assert [(r["queueId"], r["queueOffset"], r["body"]) for r in some] == [
        (q, s0["queueOffset"], "hello 0")
    ]

    # queryMsgByKey: by a KEYS entry and by the client's UNIQ_KEY, newest first
    found = admin_json("queryMsgByKey", "-n", ns.addr, "-t", TOPIC, "-k", "k2")
    assert [(m["body"], m["queueId"], m["queueOffset"]) for m in found] == [
        ("hello 2", sent[2]["queueId"], sent[2]["queueOffset"])
    ]
    assert (
        admin_json("queryMsgByKey", "-n", ns.addr, "-t", TOPIC, "-k", s0["msgId"])[0]["body"]
        == "hello 0"
    )
    table = admin("queryMsgByKey", "-n", ns.addr, "-t", TOPIC, "-k", "k1").stdout.splitlines()
    assert table[0].split() == ["#Message", "ID", "#QID", "#Offset"]
    assert table[1].split() == [
        sent[1]["msgId"],
        str(sent[1]["queueId"]),
        str(sent[1]["queueOffset"]),
    ]
    later = admin("queryMsgByKey", "-n", ns.addr, "-t", TOPIC, "-k", "k1", "-b", "4102444800000")
    assert later.returncode == 1 and "no message of key 'k1'" in later.stderr

    # misses: one line each, exit 1 (nothing there) or 2 (bad usage)
    res = admin(
        "queryMsgByOffset", "-n", ns.addr, "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "999"
    )
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "no message at" in res.stderr
    res = admin("updateTopic", "-n", ns.addr, "-c", "NoSuch", "-t", TOPIC)
    assert res.returncode == 2 and "no cluster 'NoSuch' (clusters: C)" in res.stderr
    res = admin("updateTopic", "-b", m.addr, "-t", TOPIC, "-p", "5")
    assert res.returncode == 2 and "-p/--perm must be 2 (W), 4 (R) or 6 (RW)" in res.stderr
