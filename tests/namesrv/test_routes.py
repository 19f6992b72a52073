from broker.namesrv_routes import RouteInfoManager

WRAPPER = {
    "topicConfigTable": {"T": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}},
    "dataVersion": {"counter": 1, "timestamp": 0},
}


class Clock:
    def __init__(self):
        self.now_ms = 1_000_000

    def __call__(self):
        return self.now_ms


def _group(r):
    r.register_broker("C", "10.0.0.1:10911", "b", 0, "10.0.0.1:10912", WRAPPER)
    return r.register_broker("C", "10.0.0.2:10911", "b", 1, "10.0.0.2:10912", WRAPPER)


def test_master_and_slave_in_one_route_and_slave_learns_master():
    r = RouteInfoManager(clock_ms=Clock())
    res = _group(r)
    assert res.master_addr == "10.0.0.1:10911" and res.ha_server_addr == "10.0.0.1:10912"
    route = r.topic_route("T")
    assert route["queueDatas"] == [
        {"brokerName": "b", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
    ]
    assert route["brokerDatas"] == [
        {
            "cluster": "C",
            "brokerName": "b",
            "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"},
        }
    ]
    assert r.topic_route("nope") is None


def test_expiry_after_120s_without_registration():
    clock = Clock()
    r = RouteInfoManager(clock_ms=clock)
    _group(r)
    clock.now_ms += 60_000
    r.register_broker("C", "10.0.0.2:10911", "b", 1, "10.0.0.2:10912", WRAPPER)  # slave keeps up
    clock.now_ms += 60_001  # master silent 120.001 s
    assert r.scan_not_active() == ["10.0.0.1:10911"]
    assert r.topic_route("T")["brokerDatas"][0]["brokerAddrs"] == {"1": "10.0.0.2:10911"}
    clock.now_ms += 59_999
    assert r.scan_not_active() == []  # slave heard 120.000 s ago: not yet
    clock.now_ms += 1
    assert r.scan_not_active() == ["10.0.0.2:10911"]
    assert r.topic_route("T") is None and r.cluster_info()["clusterAddrTable"] == {}


def test_failover_promoted_slave_registers_as_master():
    r = RouteInfoManager(clock_ms=Clock())
    _group(r)
    r.register_broker("C", "10.0.0.2:10911", "b", 0, "10.0.0.2:10912", WRAPPER)
    addrs = r.topic_route("T")["brokerDatas"][0]["brokerAddrs"]
    assert addrs == {"0": "10.0.0.2:10911"}
    # the old master comes back as a slave of the new one
    res = r.register_broker("C", "10.0.0.1:10911", "b", 1, "10.0.0.1:10912", WRAPPER)
    assert res.master_addr == "10.0.0.2:10911" and res.ha_server_addr == "10.0.0.2:10912"
    assert r.topic_route("T")["brokerDatas"][0]["brokerAddrs"] == {
        "0": "10.0.0.2:10911",
        "1": "10.0.0.1:10911",
    }


def test_unregister_last_broker_drops_routes():
    r = RouteInfoManager(clock_ms=Clock())
    _group(r)
    r.unregister_broker("C", "10.0.0.2:10911", "b", 1)
    assert r.topic_route("T")["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911"}
    r.unregister_broker("C", "10.0.0.1:10911", "b", 0)
    assert r.topic_route("T") is None


def test_java_compressed_register_body_layout():
    import json
    import struct
    import zlib

    from broker.namesrv_register import decode_register_body as _decode_register_body
    from broker.remoting.command import RemotingCommand

    def chunk(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    raw = (
        chunk(b'{"counter":7,"timestamp":1}')
        + struct.pack(">i", 2)
        + chunk(b"TopicA 8 8 6 SINGLE_TAG")
        + chunk(b"TBW102 8 8 7 SINGLE_TAG")
        + chunk(b"[]")
    )
    req = RemotingCommand.request(
        103, {"compressed": True, "brokerAddr": "x:1"}, zlib.compress(raw, 9)
    )
    doc = _decode_register_body(req)
    table = doc["topicConfigSerializeWrapper"]["topicConfigTable"]
    assert table["TopicA"]["writeQueueNums"] == 8 and table["TBW102"]["perm"] == 7
    assert doc["topicConfigSerializeWrapper"]["dataVersion"]["counter"] == 7
    # our own zlib(JSON) form is accepted too
    body = {"topicConfigSerializeWrapper": {"topicConfigTable": {}}}
    req.body = zlib.compress(json.dumps(body).encode())
    assert _decode_register_body(req) == body
    req.body = zlib.compress(raw[:-3])
    import pytest

    from contracts.errors import RemotingError

    with pytest.raises(RemotingError, match="truncated"):
        _decode_register_body(req)


def test_the_name_servers_scan_expires_brokers_by_ticks(driven_clock):
    """The name server's scan loop and its routes' expiry read one driven clock: a broker not
    heard from for 120 s goes at the first scan after that, with no wall time."""
    import asyncio

    from broker.namesrv import NameServer

    clock = driven_clock

    async def main():
        ns = NameServer(clock=clock, scan_interval_ms=10_000)
        _group(ns.routes)
        ns.scanner.start()
        try:
            await clock.advance(120_000)  # scans at 10 s .. 120 s: nothing expired yet
            assert ns.routes.topic_route("T") is not None
            await clock.advance(10_000)  # the scan at 130 s sees 130 s of silence
            assert ns.routes.topic_route("T") is None
        finally:
            await ns.scanner.stop()

    asyncio.run(main())


def test_a_whole_table_with_the_held_data_version_is_skipped_and_deltas_add():
    r = RouteInfoManager(clock_ms=Clock())
    r.register_broker("C", "10.0.0.1:10911", "b", 0, "", WRAPPER)
    assert r.holds_table("10.0.0.1:10911", 0, WRAPPER["dataVersion"])
    assert not r.holds_table("10.0.0.1:10911", 1, WRAPPER["dataVersion"])  # another role
    assert not r.holds_table("10.0.0.1:10911", 0, {})  # no version: never "held"
    del r.topic_queue_table["T"]  # what a skipped table would not restore
    r.register_broker("C", "10.0.0.1:10911", "b", 0, "", WRAPPER)
    assert r.topic_route("T") is None  # same dataVersion: the table was not walked
    v2 = {"counter": 2, "timestamp": 0}
    delta = {
        "topicConfigTable": {"U": {"writeQueueNums": 2, "readQueueNums": 2}},
        "dataVersion": v2,
    }
    res = r.register_broker("C", "10.0.0.1:10911", "b", 0, "", delta, incremental=True)
    assert not res.full_needed and r.topic_route("U") and r.holds_table("10.0.0.1:10911", 0, v2)
    assert r.topic_route("T") is None  # a delta adds, it does not replace


def test_a_delta_from_a_broker_not_held_asks_for_the_whole_table():
    r = RouteInfoManager(clock_ms=Clock())
    delta = {"topicConfigTable": {"U": {"writeQueueNums": 2}}, "dataVersion": {"counter": 7}}
    res = r.register_broker("C", "10.0.0.1:10911", "b", 0, "", delta, incremental=True)
    assert res.full_needed and r.topic_route("U")  # taken, but its version is not
    assert not r.holds_table("10.0.0.1:10911", 0, {"counter": 7})
    full = {**WRAPPER, "dataVersion": {"counter": 7}}
    assert not r.register_broker("C", "10.0.0.1:10911", "b", 0, "", full).full_needed
    assert r.topic_route("T")  # the whole table, which the version alone would have skipped
