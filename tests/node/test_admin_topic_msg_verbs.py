"""mqadmin's topic and message verbs against a real name server and broker process:
updateTopic, topicList, topicClusterList, sendMessage, queryMsgByOffset, printMsg,
consumeMessage, each as a table (mqadmin's shape) and as ``--json`` valid against
docs/schemas/admin.schema.json."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import wait_until
from tests.support import schemas
from tests.support.cluster import node_conf
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "MqadminTopic"


def admin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", "admin", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def admin_json(*args: str):
    res = admin(*args, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    schemas.validate(doc, "admin", args[0])
    return doc


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mqadmin")
    ns = start_namesrv(tmp)
    procs = [ns]
    try:
        port = free_port()
        m = start_broker("m", node_conf(tmp, "m", 0, "ASYNC_MASTER", port, free_port(), ns.addr,
                                        autoCreateTopicEnable="false"), port, tmp)  # fmt: skip
        procs.append(m)
        yield ns, m
    finally:
        for p in procs:
            p.kill()


def test_topic_and_message_verbs(cluster):
    ns, m = cluster
    # updateTopic on every master of the cluster, then the name server routes it
    res = admin("updateTopic", "-n", ns.addr, "-c", "C", "-t", TOPIC, "-r", "2", "-w", "2")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == f"create topic to {m.addr} success."
    assert "readQueueNums=2, writeQueueNums=2, perm=RW" in res.stdout
    rows = admin_json("updateTopic", "-b", m.addr, "-t", TOPIC, "-r", "2", "-w", "2")
    assert rows == [{"brokerAddr": m.addr, "topicConfig": rows[0]["topicConfig"]}]
    wait_until(lambda: admin("topicClusterList", "-n", ns.addr, "-t", TOPIC).stdout == "C\n",
               30, "the topic's route")  # fmt: skip
    assert admin_json("topicClusterList", "-n", ns.addr, "-t", TOPIC)["clusterList"] == ["C"]
    assert TOPIC in admin("topicList", "-n", ns.addr).stdout.splitlines()
    assert TOPIC in admin_json("topicList", "-n", ns.addr)["topicList"]

    # sendMessage, then read it back three ways
    sent = [admin_json("sendMessage", "-n", ns.addr, "-t", TOPIC, "-p", f"hello {i}", "-c", "TagA",
                       "-k", f"k{i}") for i in range(4)]  # fmt: skip
    assert all(s["sendResult"] == "SEND_OK" and s["brokerName"] == "broker-a" for s in sent)
    table = admin("sendMessage", "-n", ns.addr, "-t", TOPIC, "-p", "hello 4")
    assert table.stdout.split()[:4] == ["#Broker", "Name", "#QID", "#Send"]
    s0 = sent[0]
    msg = admin_json("queryMsgByOffset", "-n", ns.addr, "-t", TOPIC, "-b", "broker-a",
                     "-i", str(s0["queueId"]), "-o", str(s0["queueOffset"]))  # fmt: skip
    assert (msg["body"], msg["properties"]["TAGS"], msg["properties"]["KEYS"]) == (
        "hello 0",
        "TagA",
        "k0",
    )
    assert msg["properties"]["UNIQ_KEY"] == s0["msgId"] and msg["msgId"] == s0["offsetMsgId"]
    text = admin("queryMsgByOffset", "-n", ns.addr, "-t", TOPIC, "-b", "broker-a",
                 "-i", str(s0["queueId"]), "-o", str(s0["queueOffset"])).stdout  # fmt: skip
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
    some = admin_json("consumeMessage", "-n", ns.addr, "-t", TOPIC, "-b", "broker-a", "-i", str(q),
                      "-o", str(s0["queueOffset"]), "-c", "1")  # fmt: skip
    assert [(r["queueId"], r["queueOffset"], r["body"]) for r in some] == [
        (q, s0["queueOffset"], "hello 0")
    ]

    # misses: one line each, exit 1 (nothing there) or 2 (bad usage)
    res = admin(
        "queryMsgByOffset", "-n", ns.addr, "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "999"
    )
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "no message at" in res.stderr
    res = admin("updateTopic", "-n", ns.addr, "-c", "NoSuch", "-t", TOPIC)
    assert res.returncode == 2 and "no cluster 'NoSuch' (clusters: C)" in res.stderr
    res = admin("updateTopic", "-b", m.addr, "-t", TOPIC, "-p", "5")
    assert res.returncode == 2 and "-p/--perm must be 2 (W), 4 (R) or 6 (RW)" in res.stderr
