"""The broker's Prometheus endpoint (metricsExporterType=PROM) on real processes: a master and
its slave on 127.0.0.1, scraped over HTTP; the figures move with what happens (messages put,
the slave's acked offset and lag, a refused send counted by its reason)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from broker.client.producer import Producer, SendStatus
from broker.remoting.codes import RequestCode, ResponseCode
from contracts.record.properties import properties_to_string
from tests.conftest import wait_until
from tests.support.running import invoke, running_group
from tests.support.scrape import scrape, value
from tools.localcluster import free_port

TOPIC = "MetricsTopic"
N = 25


async def _send(namesrv: str, n: int) -> int:
    producer = Producer("PG", [namesrv], retry_times=1)
    size = 0
    try:
        for i in range(n):
            body = f"message {i}".encode()
            assert (await producer.send(TOPIC, body)).status is SendStatus.SEND_OK
            size += len(body)
    finally:
        await producer.close()
    return size


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics")
    ports = {"m": free_port(), "s": free_port()}
    on = {
        "metricsExporterType": "PROM",
        "slaveSyncIntervalMs": 200,
        "archiveEnable": "true",
        "archiveRoot": f"file://{tmp}/archive",
        "archiveInProcess": "true",
        "archiveIntervalMs": 200,
    }
    with running_group(
        tmp,
        slave=True,
        master={"metricsPromExporterPort": ports["m"]},
        slave_props={"metricsPromExporterPort": ports["s"]},
        **on,
    ) as g:
        yield g, ports


def test_messages_offsets_and_slave_lag_move(group):
    g, ports = group
    before = scrape(ports["m"])
    assert value(before, "haproof_broker_role", role="SYNC_MASTER") == 1
    assert value(before, "rocketmq_messages_in_total", topic=TOPIC) is None
    wait_until(
        lambda: (
            value(scrape(ports["m"]), "haproof_ha_slave_ack_offset", slave="s", slave_broker_id="1")
            is not None
        ),
        30,
        "the slave's series",
    )

    size = asyncio.run(_send(g.ns.addr, N))
    after = scrape(ports["m"])
    assert value(after, "rocketmq_messages_in_total", topic=TOPIC) == N
    assert value(after, "rocketmq_producer_offset", topic=TOPIC) == N
    end = value(after, "rocketmq_brokeruntime_commitlog_maxoffset")
    # bytes written (records, as RocketMQ's wrote bytes): the only writes since ``before``
    written = end - value(before, "rocketmq_brokeruntime_commitlog_maxoffset")
    assert value(after, "rocketmq_throughput_in_total", topic=TOPIC) == written > size
    # SYNC_MASTER: every send waited for the slave, so its ack is the end and its lag 0
    assert value(after, "haproof_ha_slave_ack_offset", slave="s", slave_broker_id="1") == end
    assert value(after, "haproof_ha_slave_lag_bytes", slave="s", slave_broker_id="1") == 0
    wait_until(
        lambda: value(scrape(ports["m"]), "rocketmq_brokeruntime_put_tps10") > 0, 10, "put TPS"
    )

    slave = scrape(ports["s"])
    assert value(slave, "haproof_broker_role", role="SLAVE") == 1
    assert value(slave, "haproof_ha_connected") == 1
    assert value(slave, "rocketmq_brokeruntime_commitlog_maxoffset") == end


def test_archive_lag_is_exported_and_drains(group):
    g, ports = group
    chunks = value(scrape(ports["m"]), "haproof_archive_chunks_total")
    assert chunks is not None and value(scrape(ports["m"]), "haproof_archive_lag_bytes") is not None
    asyncio.run(_send(g.ns.addr, 3))
    wait_until(
        lambda: value(scrape(ports["m"]), "haproof_archive_chunks_total") > chunks,
        30,
        "a chunk shipped",
    )
    wait_until(
        lambda: value(scrape(ports["m"]), "haproof_archive_lag_bytes") == 0,
        30,
        "the archive to catch up",
    )
    assert value(scrape(ports["m"]), "haproof_archive_lag_seconds") == 0


def test_a_refused_send_is_counted_by_its_reason(group):
    g, ports = group
    key = ("haproof_requests_refused_total", str(int(RequestCode.SEND_MESSAGE_V2)))

    def refused(reason: str) -> float:
        labels = {"request_code": key[1], "reason": reason}
        return value(scrape(ports["s"]), key[0], **labels) or 0

    before = refused("not_master")
    fields = {
        "a": "PG",
        "b": TOPIC,
        "c": "TBW102",
        "d": 4,
        "e": 0,
        "f": 0,
        "g": 1,
        "h": 0,
        "i": properties_to_string({}),
        "j": 0,
        "k": False,
        "m": False,
    }
    for _ in range(3):  # a slave takes no writes
        resp = asyncio.run(invoke(g.s.addr, RequestCode.SEND_MESSAGE_V2, fields, b"x"))
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert refused("not_master") == before + 3


def test_the_endpoint_is_on_loopback_only(group):
    g, ports = group
    log = (g.tmp / "m.log").read_text()
    assert f"Prometheus metrics on http://127.0.0.1:{ports['m']}/metrics" in log


def test_the_nodes_dashboard_queries_only_exported_metrics(group):
    _g, ports = group
    root = Path(__file__).resolve().parents[2]
    board = json.loads((root / "deploy" / "grafana" / "haproof.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    used = {
        n for e in exprs for n in re.findall(r"\b(?:rocketmq|haproof)_\w+|active_broker_num", e)
    }
    scraped = {name for port in ports.values() for name, _labels in scrape(port)}
    # what only a name server, a controller, an archiving or controller-mode broker exports
    sources = "".join(p.read_text() for p in (root / "broker" / "metrics").glob("*.py"))
    missing = {n for n in used - scraped if f'"{n}"' not in sources}
    assert not missing, missing
    assert {"rocketmq_brokeruntime_put_tps10", "haproof_ha_slave_lag_bytes"} <= used & scraped
