"""``haproof admin`` verbs against real processes on 127.0.0.1 (a name server, a SYNC_MASTER
``m`` and its SLAVE ``s``, archiving to a file root): each verb's table and ``--json`` output
checked against what the nodes answer to other requests, and resetOffsetByTime's offsets and
recorded ``offset_reset`` events."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from broker.admin import ha_status
from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.conftest import wait_until
from tests.support import schemas
from tests.support.cluster import node_conf
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "VerbTopic"
GROUP = "VG"
BATCH = 24

_wait = functools.partial(wait_until, timeout_s=60.0)  # a shared machine: generous deadlines


def admin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "admin", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def admin_json(*args: str):
    res = admin(*args, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    schemas.validate(doc, "admin", args[0])  # docs/schemas/admin.schema.json
    return doc


async def _call(addr: str, code: RequestCode, fields: dict | None = None, body: bytes = b""):
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields, body), 5000)
    finally:
        await client.close()


def call(addr: str, code: RequestCode, fields: dict | None = None, body: bytes = b""):
    return asyncio.run(_call(addr, code, fields, body))


def max_offset(addr: str, queue_id: int, topic: str = TOPIC) -> int:
    resp = call(addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    return int(resp.ext_fields["offset"])


def committed(addr: str, queue_id: int, topic: str = TOPIC) -> int:
    fields = {"consumerGroup": GROUP, "topic": topic, "queueId": queue_id}
    resp = call(addr, RequestCode.QUERY_CONSUMER_OFFSET, fields)
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _send(namesrv: str, n: int, size: int = 100, topic: str = TOPIC) -> None:
    producer = Producer("PG", [namesrv], retry_times=1)
    try:
        for i in range(n):
            res = await producer.send(topic, f"{i:06d}".encode().ljust(size, b"."))
            assert res.status is SendStatus.SEND_OK
    finally:
        await producer.close()


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verbs")
    root = f"file://{tmp}/archive"
    ns = start_namesrv(tmp)
    procs = [ns]
    try:
        (m_port, m_ha), (s_port, s_ha) = (free_port(), free_port()), (free_port(), free_port())
        conf = functools.partial(
            node_conf,
            tmp,
            namesrv=ns.addr,
            slaveSyncIntervalMs=200,
            archiveEnable="true",
            archiveRoot=root,
            archiveInProcess="true",
            archiveIntervalMs=200,
        )
        m = start_broker("m", conf("m", 0, "SYNC_MASTER", m_port, m_ha), m_port, tmp)
        procs.append(m)
        s_conf = conf("s", 1, "SLAVE", s_port, s_ha, haMasterAddress=f"127.0.0.1:{m_ha}")
        s = start_broker("s", s_conf, s_port, tmp)
        procs.append(s)
        # a second group, without auto-creation: TOPIC stays on broker-a, WIDE spans both
        b_port = free_port()
        b_conf = conf(
            "b",
            0,
            "ASYNC_MASTER",
            b_port,
            free_port(),
            brokerName="broker-b",
            autoCreateTopicEnable="false",
        )
        b = start_broker("b", b_conf, b_port, tmp)
        procs.append(b)
        _wait(lambda: asyncio.run(ha_status([m.addr]))[0].get("slaves"), what="slave connected")
        t0 = now_ms()
        asyncio.run(_send(ns.addr, BATCH))
        t1 = now_ms()
        yield SimpleNamespace(ns=ns, m=m, s=s, b=b, tmp=tmp, root=tmp / "archive", sent=(t0, t1))
    finally:
        for p in procs:
            p.kill()


def test_cluster_list(group):
    m, s = group.m, group.s
    doc = admin_json("clusterList", "--namesrv", group.ns.addr)
    assert doc["clusterAddrTable"] == {"C": ["broker-a", "broker-b"]}
    got = {(b["brokerName"], b["brokerId"], b["brokerAddr"]): b for b in doc["brokers"]}
    assert set(got) == {
        ("broker-a", 0, m.addr),
        ("broker-a", 1, s.addr),
        ("broker-b", 0, group.b.addr),
    }
    assert got[("broker-b", 0, group.b.addr)]["table"]["brokerRole"] == "ASYNC_MASTER"
    master, slave = got[("broker-a", 0, m.addr)], got[("broker-a", 1, s.addr)]
    assert master["table"]["brokerRole"] == "SYNC_MASTER"
    assert slave["table"]["brokerRole"] == "SLAVE"
    # the max offset shown is the node's, as haStatus (another request) reports it
    [ha] = asyncio.run(ha_status([m.addr]))
    assert int(master["table"]["commitLogMaxOffset"]) == ha["maxOffset"] > 0
    t0, t1 = group.sent  # the master's first record is the fixture's first message
    assert t0 <= int(master["table"]["earliestMessageTimeStamp"]) <= t1
    assert 0 < float(master["table"]["commitLogDiskRatio"]) < 1

    res = admin("clusterList", "--namesrv", group.ns.addr)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:5] == ["cluster", "brokerName", "BID", "addr", "role"]
    rows = {line.split()[3]: line.split() for line in lines[1:]}
    assert rows[m.addr][:5] == ["C", "broker-a", "0", m.addr, "SYNC_MASTER"]
    assert rows[s.addr][:5] == ["C", "broker-a", "1", s.addr, "SLAVE"]


def test_topic_route_and_status(group):
    m, s = group.m, group.s
    topics = json.loads(call(m.addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    nums = topics[TOPIC]["writeQueueNums"]
    route = admin_json("topicRoute", "--namesrv", group.ns.addr, "--topic", TOPIC)
    [bd] = route["brokerDatas"]
    assert bd["brokerName"] == "broker-a" and bd["brokerAddrs"] == {"0": m.addr, "1": s.addr}
    assert route["queueDatas"][0]["writeQueueNums"] == nums
    res = admin("topicRoute", "--namesrv", group.ns.addr, "--topic", TOPIC)
    assert res.returncode == 0 and m.addr in res.stdout and s.addr in res.stdout

    rows = admin_json("topicStatus", "--namesrv", group.ns.addr, "--topic", TOPIC)
    assert [r["queueId"] for r in rows] == list(range(nums))
    assert all(r["brokerAddr"] == m.addr for r in rows)
    tops = [max_offset(m.addr, q) for q in range(nums)]
    assert [r["maxOffset"] for r in rows] == tops
    assert sum(tops) >= BATCH and all(r["minOffset"] == 0 for r in rows)
    t0 = group.sent[0]
    for r in rows:  # the last message of a used queue was stored after the first send began
        assert (r["lastUpdateTimestamp"] >= t0) if r["maxOffset"] else r["lastUpdateTimestamp"] == 0
    res = admin("topicStatus", "--namesrv", group.ns.addr, "--topic", TOPIC)
    assert res.returncode == 0, res.stderr
    table = [line.split() for line in res.stdout.splitlines()[1:]]
    assert [int(t[3]) for t in table] == tops

    res = admin("topicStatus", "--namesrv", group.ns.addr, "--topic", "NoSuchTopic")
    assert res.returncode == 1 and "NoSuchTopic" in res.stderr


def test_broker_status_and_config(group):
    m, s = group.m, group.s
    docs = admin_json("brokerStatus", "--namesrv", group.ns.addr, "--broker-name", "broker-a")
    by_addr = {d["brokerAddr"]: d["table"] for d in docs}
    assert set(by_addr) == {m.addr, s.addr}  # only the group asked for
    assert by_addr[m.addr]["brokerRole"] == "SYNC_MASTER"
    assert by_addr[s.addr]["brokerRole"] == "SLAVE"
    res = admin("brokerStatus", "--broker-addr", m.addr)
    assert res.returncode == 0
    assert any(
        line.split()[:2] == ["brokerRole", "SYNC_MASTER"] for line in res.stdout.splitlines()
    )

    [doc] = admin_json("getBrokerConfig", "--broker-addr", s.addr)
    cfg = doc["config"]
    assert (cfg["brokerName"], cfg["brokerRole"], cfg["nodeName"]) == ("broker-a", "SLAVE", "s")
    assert cfg["listenPort"] == str(s.port) and cfg["brokerClusterName"] == "C"
    assert doc["version"]["counter"] == 0
    res = admin("getBrokerConfig", "--broker-addr", m.addr)
    rows = {line.split()[0]: line.split()[1:] for line in res.stdout.splitlines()[2:]}
    assert rows["brokerRole"] == ["SYNC_MASTER"] and rows["maxMessageSize"][1] == "yes"

    dead = f"127.0.0.1:{free_port()}"
    res = admin("brokerStatus", "--broker-addr", dead)
    assert res.returncode == 1 and dead in res.stderr


def _events(root, node: str) -> list[dict]:
    d = root / "v1" / "C" / "broker-a" / node / "events"
    return [json.loads(p.read_text()) for p in sorted(d.rglob("*-offset_reset.json"))]


def test_reset_offset_by_time(group):
    ns, m, s = group.ns, group.m, group.s
    nums = len(admin_json("topicStatus", "--namesrv", ns.addr, "--topic", TOPIC))
    first = [max_offset(m.addr, q) for q in range(nums)]  # the fixture's batch
    boundary = now_ms() + 1  # later than every store time so far
    _wait(lambda: now_ms() > boundary, what="the clock passing the boundary")
    asyncio.run(_send(ns.addr, BATCH))
    tops = [max_offset(m.addr, q) for q in range(nums)]
    assert sum(tops) == sum(first) + BATCH
    for q in range(nums):
        call(
            m.addr,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q, "commitOffset": tops[q]},
        )
    _wait(lambda: [committed(s.addr, q) for q in range(nums)] == tops, what="slave copy")

    rows = admin_json(
        "resetOffsetByTime",
        "--namesrv",
        ns.addr,
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--timestamp",
        str(boundary),
    )
    on_m = {r["queueId"]: r for r in rows if r["brokerAddr"] == m.addr}
    on_s = {r["queueId"]: r for r in rows if r["brokerAddr"] == s.addr}
    assert sorted(on_m) == sorted(on_s) == list(range(nums))
    for q in range(nums):
        # the first message stored at or after the boundary is the second batch's first
        assert on_m[q]["offset"] == on_s[q]["offset"] == first[q]
        assert on_m[q]["previousOffset"] == tops[q]
        # the slave may hold the reset already: the master's reset record came through the log
        assert on_s[q]["previousOffset"] in (tops[q], first[q])
        assert committed(m.addr, q) == committed(s.addr, q) == first[q]
    moved = {q for q in range(nums) if first[q] != tops[q]}
    assert moved, "the second batch reached no queue"

    def recorded(node):  # (a slave that got the reset through the log also records the
        # admin's no-op reset after it: from == to)
        events = _events(group.root, node)
        return {e["queue"]: e for e in events if e["group"] == GROUP and e["from"] != e["to"]}

    for node in ("m", "s"):
        _wait(lambda node=node: set(recorded(node)) >= moved, what=f"{node}'s offset_reset events")
        for q in moved:
            e = recorded(node)[q]
            assert (e["kind"], e["topic"], e["from"], e["to"]) == (
                "offset_reset",
                TOPIC,
                tops[q],
                first[q],
            )

    # one queue, an ISO time before every message: back to the queue's first offset
    q = min(moved)
    res = admin(
        "resetOffsetByTime",
        "--broker-addr",
        m.addr,
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--timestamp",
        "1970-01-01T00:00:01Z",
        "--queue",
        str(q),
    )
    assert res.returncode == 0, res.stderr
    assert f"{GROUP} {TOPIC}/{q} {first[q]} -> 0" in res.stdout
    assert committed(m.addr, q) == 0

    res = admin(
        "resetOffsetByTime",
        "--broker-addr",
        m.addr,
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--timestamp",
        "yesterday",
    )
    assert res.returncode == 2 and "'yesterday'" in res.stderr


def test_reset_by_time_speaks_rocketmq_reset_offset_body(group):
    """mqadmin's resetOffsetByTime header (no queueId, no offset) gets ResetOffsetBody as
    fastjson writes it: MessageQueue objects as keys."""
    m = group.m
    fields = {"group": "OtherGroup", "topic": TOPIC, "timestamp": 0, "isForce": "true"}
    resp = call(m.addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    text = resp.body.decode()
    assert text.startswith(
        '{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"VerbTopic"}:0'
    )


WIDE = "WideTopic"


def test_reset_offset_by_time_over_every_group_of_the_topic(group):
    """Without --broker-name a topic on two groups is reset in both (as mqadmin does)."""
    ns, masters = group.ns, {"broker-a": group.m.addr, "broker-b": group.b.addr}
    for addr in masters.values():
        resp = call(
            addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": WIDE, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    asyncio.run(_send(ns.addr, 8, topic=WIDE))
    boundary = now_ms() + 1
    _wait(lambda: now_ms() > boundary, what="the clock passing the boundary")
    first = {(n, q): max_offset(a, q, WIDE) for n, a in masters.items() for q in range(2)}
    asyncio.run(_send(ns.addr, 8, topic=WIDE))
    tops = {(n, q): max_offset(a, q, WIDE) for n, a in masters.items() for q in range(2)}
    assert sum(tops.values()) == 16 and all(first[k] < tops[k] for k in first)
    for (name, q), top in tops.items():
        call(
            masters[name],
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": GROUP, "topic": WIDE, "queueId": q, "commitOffset": top},
        )

    rows = admin_json(
        "resetOffsetByTime",
        "--namesrv",
        ns.addr,
        "--group",
        GROUP,
        "--topic",
        WIDE,
        "--timestamp",
        str(boundary),
    )
    by_master = {(r["brokerAddr"], r["queueId"]): r for r in rows}
    for (name, q), top in tops.items():
        r = by_master[(masters[name], q)]
        assert (r["previousOffset"], r["offset"]) == (top, first[(name, q)])
        assert committed(masters[name], q, WIDE) == first[(name, q)]
    assert any(r["brokerAddr"] == group.s.addr for r in rows)  # broker-a's slave follows

    res = admin(
        "resetOffsetByTime",
        "--namesrv",
        ns.addr,
        "--group",
        GROUP,
        "--topic",
        WIDE,
        "--timestamp",
        "now",
        "--queue",
        "0",
    )
    assert res.returncode == 1 and "give --broker-name" in res.stderr


def test_ha_status_table_and_json(group):
    ns, m, s = group.ns, group.m, group.s
    docs = admin_json("haStatus", "--namesrv", ns.addr, "--broker-name", "broker-a")
    by_node = {d["nodeName"]: d for d in docs}
    assert set(by_node) == {"m", "s"}
    assert (by_node["m"]["brokerAddr"], by_node["m"]["brokerRole"]) == (m.addr, "SYNC_MASTER")
    assert (by_node["s"]["brokerAddr"], by_node["s"]["brokerRole"]) == (s.addr, "SLAVE")
    # the master's view of its slave agrees with the slave's own max offset once it caught up
    top = int(admin_json("brokerStatus", "--broker-addr", m.addr)[0]["table"]["commitLogMaxOffset"])

    def caught_up():
        [doc] = admin_json("haStatus", "--broker-addr", m.addr)
        return doc["slaves"] and doc["slaves"][0]["ackOffset"] >= top and doc

    doc = _wait(caught_up, what="the slave acknowledging the master's max offset")
    assert doc["slaves"][0]["diff"] == doc["maxOffset"] - doc["slaves"][0]["ackOffset"]
    res = admin("haStatus", "--broker-addr", f"{m.addr};{s.addr}")
    assert res.returncode == 0, res.stderr
    assert f"m {m.addr} SYNC_MASTER brokerId 0" in res.stdout
    assert f"s {s.addr} SLAVE brokerId 1" in res.stdout and "inSync" in res.stdout


def test_mqadmin_habits_n_b_and_namesrv_addr(group):
    """``-n`` / ``-b`` as mqadmin spells them; ``$NAMESRV_ADDR`` when neither is given."""
    ns, m = group.ns, group.m
    by_flag = admin_json("clusterList", "--namesrv", ns.addr)
    assert (
        admin_json("clusterList", "-n", ns.addr)["clusterAddrTable"] == by_flag["clusterAddrTable"]
    )
    env = {**os.environ, "NAMESRV_ADDR": ns.addr}
    res = subprocess.run(
        [sys.executable, "-m", "broker.cli", "admin", "clusterList", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["clusterAddrTable"] == by_flag["clusterAddrTable"]
    # -b names the nodes: $NAMESRV_ADDR does not add the cluster's others
    res = subprocess.run(
        [sys.executable, "-m", "broker.cli", "admin", "brokerStatus", "-b", m.addr, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert [d["brokerAddr"] for d in json.loads(res.stdout)] == [m.addr]
    # neither: one line, exit 2
    env.pop("NAMESRV_ADDR")
    res = subprocess.run(
        [sys.executable, "-m", "broker.cli", "admin", "clusterList"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
