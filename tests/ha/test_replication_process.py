"""Classic HA with real processes on 127.0.0.1: a name server, a master and a slave broker
process, the HA link optionally through the fault proxy (tools/faultproxy.py)."""

from __future__ import annotations

import asyncio
import functools
import json
import socket

from broker.admin import ha_status
from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.ids import parse_message_id
from contracts.record.reader import scan_records
from tests.support.cluster import conf_factory
from tests.support.waiting import wait_for as support_wait_for
from tools.faultproxy import FaultProxy
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "HaTopic"
FILE_SIZE = 256 * 1024


_conf = conf_factory(
    mappedFileSizeCommitLog=FILE_SIZE,
    haSendHeartbeatInterval=500,
    haHousekeepingInterval=5000,
    slaveSyncIntervalMs=300,
)


class Cluster:
    """namesrv + master "m" + slave "s"; the slave's HA link goes through ``proxy`` if set."""

    def __init__(self, tmp_path, role="ASYNC_MASTER", **master_extra) -> None:
        self.tmp = tmp_path
        self.ns = start_namesrv(tmp_path)
        self.procs = [self.ns]
        self.m_port, self.m_ha = free_port(), free_port()
        self.s_port, self.s_ha = free_port(), free_port()
        conf = _conf(tmp_path, "m", 0, role, self.m_port, self.m_ha, self.ns.addr, **master_extra)
        self.master = start_broker("m", conf, self.m_port, tmp_path)
        self.procs.append(self.master)
        self.slave = None

    def start_slave(self, ha_addr: str | None = None, learn: bool = False, **extra):
        """``learn``: no haMasterAddress, the slave learns it from its registration."""
        if not learn:
            extra["haMasterAddress"] = ha_addr or f"127.0.0.1:{self.m_ha}"
        conf = _conf(self.tmp, "s", 1, "SLAVE", self.s_port, self.s_ha, self.ns.addr, **extra)
        self.slave = start_broker("s", conf, self.s_port, self.tmp)
        self.procs.append(self.slave)
        return self.slave

    def close(self) -> None:
        for p in self.procs:
            p.kill()


async def status(addr: str) -> dict:
    return (await ha_status([addr]))[0]


wait_for = functools.partial(support_wait_for, timeout_ms=60_000)  # tests/support/waiting.py


async def slave_ack(master_addr: str) -> int:
    slaves = (await status(master_addr)).get("slaves") or []
    return max((s["ackOffset"] for s in slaves), default=-1)


async def connected(master_addr: str) -> bool:
    return bool((await status(master_addr)).get("slaves"))


async def caught_up(master_addr: str) -> bool:
    st = await status(master_addr)
    acks = [s["ackOffset"] for s in st.get("slaves") or []]
    return bool(acks) and max(acks) == st["masterMaxOffset"] > 0


async def send(producer: Producer, i: int, label: str):
    body = f"{label}-{i}:".encode() * 16
    res = await producer.send(TOPIC, body, keys=f"{label}-{i}")
    return res, body


def phys_offset(res) -> int:
    return parse_message_id(res.offset_msg_id)[2]


async def pull_queue(client, addr: str, queue_id: int, offset: int, n: int) -> list:
    req = RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "check",
            "topic": TOPIC,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": n,
            "sysFlag": 0,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
        },
    )
    resp = await client.invoke(addr, req, 5000)
    if resp.code != ResponseCode.SUCCESS:
        return []
    return list(scan_records(resp.body))


async def check_on(addr: str, acked: list) -> None:
    """Every acknowledged (result, body) pair is served by the broker at ``addr``."""
    client = RemotingClient()
    try:
        res0 = acked[0][0]
        # A slave knows the topic once SlaveSynchronize copied it (every 300 ms here).
        await wait_for(
            lambda: pull_queue(client, addr, res0.queue.queue_id, res0.queue_offset, 1),
            what=f"{addr} serving {TOPIC}",
        )
        for res, body in acked:
            recs = await pull_queue(client, addr, res.queue.queue_id, res.queue_offset, 1)
            assert recs, f"{addr} does not serve {res.queue} offset {res.queue_offset}"
            assert recs[0].body == body
    finally:
        await client.close()


def commit_log(store_dir) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((store_dir / "commitlog").iterdir())}


def assert_identical_logs(tmp_path) -> None:
    m, s = commit_log(tmp_path / "store-m"), commit_log(tmp_path / "store-s")
    assert list(m) == list(s), (list(m), list(s))
    for name in m:
        assert m[name] == s[name], f"commit log file {name} differs between master and slave"


def test_2000_messages_slave_log_byte_identical_pulls_and_offsets_synced(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.start_slave()

        async def main():
            producer = Producer("PG", [c.ns.addr], retry_times=0)
            acked = []
            try:
                for i in range(2000):
                    res, body = await send(producer, i, "m")
                    assert res.status is SendStatus.SEND_OK
                    acked.append((res, body))
            finally:
                await producer.close()
            st = await wait_for(lambda: caught_up(c.master.addr), what="slave caught up")
            assert st
            assert (await status(c.master.addr))["masterMaxOffset"] > 2 * FILE_SIZE
            await check_on(c.slave.addr, acked)  # the slave's consume queues serve pulls

            # A consumer offset committed on the master reaches the slave (SlaveSynchronize).
            client = RemotingClient()
            try:
                qid = acked[-1][0].queue.queue_id
                req = RemotingCommand.request(
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {"consumerGroup": "G1", "topic": TOPIC, "queueId": qid, "commitOffset": 7},
                )
                resp = await client.invoke(c.master.addr, req, 5000)
                assert resp.code == ResponseCode.SUCCESS

                async def synced():
                    q = RemotingCommand.request(
                        RequestCode.QUERY_CONSUMER_OFFSET,
                        {"consumerGroup": "G1", "topic": TOPIC, "queueId": qid},
                    )
                    r = await client.invoke(c.slave.addr, q, 5000)
                    return r.code == ResponseCode.SUCCESS and r.ext_fields.get("offset") == "7"

                await wait_for(synced, what="consumer offset copied to the slave")
            finally:
                await client.close()

        asyncio.run(main())
        c.slave.stop()
        c.master.stop()
        assert_identical_logs(tmp_path)
        offsets = json.loads((tmp_path / "store-s" / "config" / "consumerOffset.json").read_text())
        assert any(k == f"{TOPIC}@G1" for k in offsets["offsetTable"])
    finally:
        c.close()


def test_sync_master_ok_timeout_on_blackhole_and_slave_not_available(tmp_path):
    c = Cluster(tmp_path, role="SYNC_MASTER", syncFlushTimeout=1500)
    try:

        async def main():
            proxy = await FaultProxy.start("127.0.0.1", c.m_ha)
            producer = Producer("PG", [c.ns.addr], retry_times=0)
            try:
                await asyncio.to_thread(c.start_slave, f"127.0.0.1:{proxy.port}")
                await wait_for(lambda: connected(c.master.addr), what="slave connected")
                for i in range(50):
                    res, _ = await send(producer, i, "ok")
                    assert res.status is SendStatus.SEND_OK, res.status
                    # OK means the slave's ack already covers the message.
                    assert await slave_ack(c.master.addr) > phys_offset(res)

                proxy.blackhole(True)
                res, _ = await send(producer, 0, "hole")
                assert res.status is SendStatus.FLUSH_SLAVE_TIMEOUT
                proxy.blackhole(False)
                proxy.drop()  # the blackholed stream lost bytes: both ends start over
                await wait_for(lambda: caught_up(c.master.addr), what="slave back after hole")
                res, _ = await send(producer, 1, "after")
                assert res.status is SendStatus.SEND_OK

                await asyncio.to_thread(c.slave.kill)

                async def no_slave():
                    return not (await status(c.master.addr)).get("slaves")

                await wait_for(no_slave, what="master sees the slave gone")
                res, _ = await send(producer, 2, "alone")
                assert res.status is SendStatus.SLAVE_NOT_AVAILABLE
            finally:
                await producer.close()
                await proxy.stop()

        asyncio.run(main())
    finally:
        c.close()


def test_faults_on_the_ha_link_and_a_slave_restart_lose_nothing_acknowledged(tmp_path):
    c = Cluster(tmp_path, role="SYNC_MASTER", syncFlushTimeout=2000)
    try:

        async def main():
            proxy = await FaultProxy.start("127.0.0.1", c.m_ha)
            producer = Producer("PG", [c.ns.addr], retry_times=0)
            acked: list = []
            statuses: dict[SendStatus, int] = {}
            stop = asyncio.Event()

            async def traffic():
                i = 0
                while not stop.is_set():
                    try:
                        res, body = await send(producer, i, "f")
                    except Exception:  # noqa: BLE001 - a send may fail outright: not acked
                        await asyncio.sleep(0.05)
                        continue
                    statuses[res.status] = statuses.get(res.status, 0) + 1
                    if res.status is SendStatus.SEND_OK:
                        acked.append((res, body))
                    i += 1

            async def progress(n: int = 20):
                target = len(acked) + n
                await wait_for(lambda: asyncio.sleep(0, len(acked) >= target), what="traffic")

            try:
                await asyncio.to_thread(c.start_slave, f"127.0.0.1:{proxy.port}")
                await wait_for(lambda: connected(c.master.addr), what="slave connected")
                task = asyncio.create_task(traffic())
                await progress()
                for fault in ("drop", "half_close", "reset"):
                    accepted = proxy.accepted
                    getattr(proxy, fault)()
                    await wait_for(
                        lambda a=accepted: asyncio.sleep(0, proxy.accepted > a),
                        what=f"slave reconnects after {fault}",
                    )
                    await progress()
                proxy.set_delay_ms(150)
                await progress(10)
                proxy.set_delay_ms(0)
                await progress()

                # Restart the slave mid-stream (kill -9, same store).
                await asyncio.to_thread(c.slave.kill)
                c.procs.remove(c.slave)
                await asyncio.to_thread(c.start_slave, f"127.0.0.1:{proxy.port}")
                await progress()
                stop.set()
                await task
                await wait_for(lambda: caught_up(c.master.addr), what="slave caught up")
                await check_on(c.slave.addr, acked)
                assert proxy.accepted >= 5  # first link, one per fault, the restarted slave
            finally:
                stop.set()
                await producer.close()
                await proxy.stop()
            return statuses

        statuses = asyncio.run(main())
        assert statuses[SendStatus.SEND_OK] >= 100
        c.slave.stop()
        c.master.stop()
        assert_identical_logs(tmp_path)
    finally:
        c.close()


def test_garbage_on_the_ha_port_drops_that_connection_only(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.start_slave()

        async def main():
            producer = Producer("PG", [c.ns.addr], retry_times=0)
            try:
                await send(producer, 0, "g")
                await wait_for(lambda: caught_up(c.master.addr), what="slave caught up")
                for payload in (b"\xff" * 8, (1 << 40).to_bytes(8, "big"), b"abc"):
                    with socket.create_connection(("127.0.0.1", c.m_ha), timeout=10) as sock:
                        sock.sendall(payload)
                        if len(payload) < 8:
                            sock.shutdown(socket.SHUT_WR)
                        sock.settimeout(10)
                        # The master closes it (a truncated report ends the same way).
                        while sock.recv(65536):
                            pass
                res, _ = await send(producer, 1, "g")
                assert res.status is SendStatus.SEND_OK
                await wait_for(lambda: caught_up(c.master.addr), what="slave still replicating")
                assert len((await status(c.master.addr))["slaves"]) == 1
            finally:
                await producer.close()

        asyncio.run(main())
        assert c.master.alive() and c.slave.alive()
        log = (tmp_path / "m.log").read_text()
        assert "negative offset" in log and "beyond the master's log end" in log
    finally:
        c.close()


def test_slave_learns_its_master_from_the_name_server(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.start_slave(learn=True)

        async def main():
            producer = Producer("PG", [c.ns.addr], retry_times=0)
            try:
                acked = [await send(producer, i, "l") for i in range(100)]
            finally:
                await producer.close()
            await wait_for(lambda: caught_up(c.master.addr), what="slave caught up")
            await check_on(c.slave.addr, acked)
            client = RemotingClient()
            try:
                req = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
                resp = await client.invoke(c.slave.addr, req, 5000)
                table = json.loads(resp.body)["table"]
            finally:
                await client.close()
            # RegisterBrokerResponseHeader's haServerAddr is the master's haListenPort
            assert table["haMasterAddress"] == f"127.0.0.1:{c.m_ha}"
            assert table["haConnected"] in ("true", "True")

        asyncio.run(main())
    finally:
        c.close()
