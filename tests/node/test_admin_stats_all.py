"""mqadmin's statsAll against a real name server and broker process (VIEW_BROKER_STATS_DATA
315, QUERY_TOPIC_CONSUME_BY_WHO 300, GET_CONSUME_STATS 208): messages put and consumed show as
the topic's and the group's day counts, what is left as its accumulation; a topic nobody
consumes is NO_CONSUMER; the table is mqadmin's, ``--json`` valid against its schema."""

from __future__ import annotations

import asyncio

import pytest

from broker.client.consumer import Consumer
from broker.client.producer import Producer, SendStatus
from broker.processors.stats_windows import KeyedStats
from tests.support.running import admin, admin_json, running_group

N = 12


async def _traffic(namesrv: str) -> int:
    producer = Producer("StatsPG", [namesrv], retry_times=1)
    try:
        for i in range(N):
            assert (await producer.send("StatsT", f"m{i}".encode())).status is SendStatus.SEND_OK
            assert (await producer.send("QuietT", b"q")).status is SendStatus.SEND_OK
    finally:
        await producer.close()
    consumer = Consumer("StatsG", [namesrv], "StatsT", client_id="stats-c")
    got = 0
    try:
        await consumer.heartbeat()
        for _ in range(20):
            got += len(await consumer.poll())
            if got >= N // 2:
                break
        await consumer.persist()
    finally:
        await consumer.close()
    return got


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_group(tmp_path_factory.mktemp("stats")) as g:
        yield g


def test_stats_all(cluster):
    g = cluster
    got = asyncio.run(_traffic(g.ns.addr))
    assert got > 0
    doc = admin_json("statsAll", "-n", g.ns.addr)
    rows = {(r["topic"], r["consumerGroup"]): r for r in doc["rows"]}
    row = rows[("StatsT", "StatsG")]
    assert (row["inMsg24Hour"], row["outMsg24Hour"]) == (N, got)
    assert row["accumulation"] == N - got
    assert rows[("QuietT", None)]["inMsg24Hour"] == N
    assert rows[("QuietT", None)]["outMsg24Hour"] is None
    assert doc["errors"] == []

    table = admin("statsAll", "-n", g.ns.addr, "-t", "QuietT").stdout.splitlines()
    assert table[0].split() == [
        "#Topic",
        "#Consumer",
        "Group",
        "#Accumulation",
        "#InTPS",
        "#OutTPS",
        "#InMsg24Hour",
        "#OutMsg24Hour",
    ]
    [line] = table[1:]
    assert line.split()[0] == "QuietT" and line.split()[-2:] == [str(N), "NO_CONSUMER"]


def test_windows_count_from_a_keys_first_count_and_roll():
    stats = KeyedStats("t")
    stats.add("a", 3, now_ms=1_000)
    stats.sample(1_000)
    stats.add("a", 2, now_ms=5_000)
    w = stats.windows("a", 11_000)
    assert {k: v["sum"] for k, v in w.items()} == {"statsMinute": 5, "statsHour": 5, "statsDay": 5}
    assert w["statsMinute"]["tps"] == 0.5 and w["statsMinute"]["avgpt"] == 2.5
    for t in range(11_000, 200_000, 1_000):  # minutes later: the minute holds nothing new
        stats.sample(t)
    w = stats.windows("a", 200_000)
    assert (w["statsMinute"]["sum"], w["statsHour"]["sum"]) == (0, 5)
    assert stats.windows("b", 200_000) is None
