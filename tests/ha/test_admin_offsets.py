"""``haproof admin consumerProgress`` and ``resetOffset`` against real processes (namesrv, a
SYNC_MASTER and its SLAVE), their exit codes, and the reset's record (offset-reset listeners)."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from broker.admin import ha_status
from broker.client.producer import Producer, SendStatus
from broker.config import BrokerRole
from broker.processors.ha_admin import OffsetAdminService
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.consumer_offsets import ConsumerOffsetManager
from broker.store.role import BrokerRoleState
from broker.store.topic_configs import TopicConfigManager
from tests.conftest import wait_until
from tests.support import schemas
from tools.localcluster import free_port, start_broker, start_namesrv, write_broker_conf

TOPIC = "ProgressTopic"
GROUP = "CG"


# A shared machine: generous deadlines.
_wait = functools.partial(wait_until, timeout_s=60.0)


def _admin(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "admin", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


async def _call(addr: str, code: RequestCode, fields: dict) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields), 5000)
    finally:
        await client.close()


def _commit(addr: str, queue_id: int, offset: int) -> None:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset}
    resp = asyncio.run(_call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, fields))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def _committed(addr: str, queue_id: int) -> int:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id}
    resp = asyncio.run(_call(addr, RequestCode.QUERY_CONSUMER_OFFSET, fields))
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1


def _max_offset(addr: str, queue_id: int) -> int:
    resp = asyncio.run(
        _call(addr, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": queue_id})
    )
    return int(resp.ext_fields["offset"])


async def _send(namesrv: str, n: int) -> int:
    producer = Producer("PG", [namesrv], retry_times=1)
    ok = 0
    try:
        for i in range(n):
            res = await producer.send(TOPIC, f"m{i}".encode() * 10)
            ok += res.status is SendStatus.SEND_OK
    finally:
        await producer.close()
    return ok


@pytest.fixture
def group(tmp_path):
    ns = start_namesrv(tmp_path)
    procs = [ns]
    try:
        (m_port, m_ha), (s_port, s_ha) = (free_port(), free_port()), (free_port(), free_port())

        def conf(name, broker_id, role, port, ha_port, **extra):
            return write_broker_conf(
                tmp_path / f"{name}.conf",
                {
                    "brokerClusterName": "C",
                    "brokerName": "broker-a",
                    "brokerId": broker_id,
                    "brokerRole": role,
                    "storePathRootDir": tmp_path / f"store-{name}",
                    "listenPort": port,
                    "haListenPort": ha_port,
                    "namesrvAddr": ns.addr,
                    "nodeName": name,
                    "mappedFileSizeCommitLog": 256 * 1024,
                    "slaveSyncIntervalMs": 200,
                    **extra,
                },
            )

        m = start_broker("m", conf("m", 0, "SYNC_MASTER", m_port, m_ha), m_port, tmp_path)
        procs.append(m)
        s_conf = conf("s", 1, "SLAVE", s_port, s_ha, haMasterAddress=f"127.0.0.1:{m_ha}")
        s = start_broker("s", s_conf, s_port, tmp_path)
        procs.append(s)
        # A SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave is connected.
        _wait(lambda: asyncio.run(ha_status([m.addr]))[0].get("slaves"), what="slave connected")
        assert asyncio.run(_send(ns.addr, 40)) == 40
        yield SimpleNamespace(ns=ns, m=m, s=s, tmp=tmp_path)
    finally:
        for p in procs:
            p.kill()


def test_consumer_progress_and_reset_offset(group):
    ns, m, s = group.ns, group.m, group.s
    tops = [_max_offset(m.addr, q) for q in range(4)]
    assert sum(tops) == 40
    for q in range(4):
        _commit(m.addr, q, tops[q] - q)  # queue q lags by q messages

    res = _admin("consumerProgress", "--namesrv", ns.addr, "--group", GROUP, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    docs = json.loads(res.stdout)
    schemas.validate(docs, "admin", "consumerProgress")
    assert [d["brokerAddr"] for d in docs] == [m.addr]  # the group's master
    rows = {r["queueId"]: r for r in docs[0]["offsetTable"] if r["topic"] == TOPIC}
    assert sorted(rows) == [0, 1, 2, 3]
    for q, r in rows.items():
        assert (r["brokerOffset"], r["consumerOffset"], r["diff"]) == (tops[q], tops[q] - q, q)

    # brokerConsumeStats: every group with committed offsets on the broker, the same lags
    res = _admin("brokerConsumeStats", "-b", m.addr, "--json")
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout)
    schemas.validate(stats, "admin", "brokerConsumeStats")
    mine = {
        r["queueId"]: r["diff"] for r in stats["rows"] if (r["group"], r["topic"]) == (GROUP, TOPIC)
    }
    assert mine == {q: q for q in range(4)} and stats["totalDiff"] >= 6
    text = _admin("brokerConsumeStats", "-b", m.addr).stdout
    assert text.split()[:2] == ["#Topic", "#Group"] and "Diff Total: " in text

    table = _admin("consumerProgress", "--broker-addr", m.addr, "--group", GROUP)
    assert table.returncode == 0, table.stderr
    assert "diff total: 6" in table.stdout and TOPIC in table.stdout

    # The slave has copied the offsets; the reset goes to the master first, then the slave.
    _wait(lambda: _committed(s.addr, 3) == tops[3] - 3, what="offsets copied to the slave")
    res = _admin(
        "resetOffset",
        "--namesrv",
        ns.addr,
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--queue",
        "2",
        "--offset",
        "1",
        "--json",
    )
    assert res.returncode == 0, res.stdout + res.stderr
    done = json.loads(res.stdout)
    schemas.validate(done, "admin", "resetOffset")
    assert [d["brokerAddr"] for d in done] == [m.addr, s.addr]
    assert all(d["offset"] == 1 for d in done) and done[0]["previousOffset"] == tops[2] - 2
    # the slave may hold the reset already: the master's reset record came through the log
    assert done[1]["previousOffset"] in (tops[2] - 2, 1)
    assert _committed(m.addr, 2) == 1 and _committed(s.addr, 2) == 1
    assert "admin reset of CG ProgressTopic/2" in (group.tmp / "m.log").read_text()
    # Slave sync rounds go on (a new commit arrives) and do not undo the reset.
    _commit(m.addr, 0, tops[0])
    _wait(lambda: _committed(s.addr, 0) == tops[0], what="a slave sync round after the reset")
    assert _committed(s.addr, 2) == 1
    # After the reset the offset moves forward again through ordinary commits.
    _commit(m.addr, 2, 2)
    assert _committed(m.addr, 2) == 2


def test_admin_offsets_errors(group):
    m = group.m
    dead = f"127.0.0.1:{free_port()}"
    res = _admin("consumerProgress", "--group", GROUP)
    assert res.returncode == 2 and "--namesrv or --broker-addr" in res.stderr
    res = _admin(
        "resetOffset",
        "--broker-addr",
        m.addr,
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--queue",
        "0",
        "--offset",
        "-5",
    )
    assert res.returncode == 2 and "--offset (-5)" in res.stderr
    res = _admin("consumerProgress", "--broker-addr", dead, "--group", GROUP)
    assert res.returncode == 1 and dead in res.stderr and "unreachable" in res.stderr
    res = _admin("consumerProgress", "--broker-addr", m.addr, "--group", "nobody")
    assert res.returncode == 1 and "knows no consumer group 'nobody'" in res.stderr
    res = _admin(
        "resetOffset",
        "--broker-addr",
        m.addr,
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--queue",
        "9",
        "--offset",
        "0",
    )
    assert res.returncode == 1 and "queueId 9 out of range" in res.stderr and m.addr in res.stderr
    res = _admin(
        "resetOffset",
        "--broker-addr",
        m.addr,
        "--group",
        GROUP,
        "--topic",
        "NoTopic",
        "--queue",
        "0",
        "--offset",
        "0",
    )
    assert res.returncode == 1 and "topic 'NoTopic' does not exist" in res.stderr
    res = _admin(
        "resetOffset",
        "--broker-addr",
        m.addr,
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--queue",
        "0",
        "--offset",
        "1000000",
    )
    assert res.returncode == 1 and "beyond" in res.stderr
    res = _admin(
        "resetOffset",
        "--namesrv",
        f"127.0.0.1:{free_port()}",
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--queue",
        "0",
        "--offset",
        "0",
    )
    assert res.returncode == 1 and "no route" in res.stderr


def test_reset_is_recorded_for_the_listeners(tmp_path):
    offsets = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    offsets.commit(GROUP, TOPIC, 1, 30)
    topics = TopicConfigManager.load(str(tmp_path / "topics.json"))
    topics.put(TOPIC, {"readQueueNums": 4})
    store = SimpleNamespace(
        consumer_offsets=offsets,
        topic_config=topics,
        get_max_offset_in_queue=lambda topic, qid: 50,
    )
    events = []
    node = SimpleNamespace(
        store=store,
        config=SimpleNamespace(broker_addr="127.0.0.1:1", broker_name="broker-a"),
        role=BrokerRoleState(BrokerRole.SYNC_MASTER, 0),
    )
    offsets.reset_listeners.append(lambda *ev: events.append(ev))
    svc = OffsetAdminService(node.store, node.config, node.role)
    assert svc.reset(GROUP, TOPIC, 1, 10) == 30
    assert events == [(GROUP, TOPIC, 1, 30, 10)]
    assert ConsumerOffsetManager.load(offsets.path).query(GROUP, TOPIC, 1) == 10  # persisted
    with pytest.raises(ValueError, match="beyond"):
        svc.reset(GROUP, TOPIC, 1, 51)
    assert len(events) == 1 and svc.runtime_info() == {"offsetResets": 1}
