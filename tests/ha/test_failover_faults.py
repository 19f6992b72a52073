"""Fault test 1, repeated: kill -9 the master of a SYNC_MASTER + SYNC_FLUSH pair while several
producers write, promote the slave, prove every acknowledged message is readable on the new
master byte for byte, restart the old master as its slave (it truncates its unreplicated tail)
and check the two commit logs agree; then do it again the other way round.

``ROUNDS_DEFAULT`` rounds in the default run; ``pytest -m stress`` runs ``ROUNDS_STRESS``.
Real processes on 127.0.0.1 (namesrv + two broker nodes); nothing waits on a sleep: every wait
polls a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
import time
import zlib

import pytest

from broker.admin import ha_status
from broker.client.producer import Producer, SendStatus
from broker.ha.failover import promote
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.cli import iter_dump
from contracts.record.reader import decode_record
from tests.conftest import wait_until
from tests.support.aio import async_test
from tests.support.cluster import knows_topic
from tools.localcluster import free_port, start_broker, start_namesrv, write_broker_conf

TOPIC = "FaultTopic"
PRODUCERS = 3
ROUNDS_DEFAULT = 2
ROUNDS_STRESS = 20
ACKED_BEFORE_KILL = 120  # acknowledged sends per round before the kill (at least)


# A shared machine: generous deadlines.
_wait = functools.partial(wait_until, timeout_s=90.0)


class Pair:
    """Two nodes of broker-a with fixed ports and stores; either may be master."""

    def __init__(self, tmp_path, **extra):
        self.tmp = tmp_path
        self.extra = extra
        self.ns = start_namesrv(tmp_path)
        self.ports = {n: (free_port(), free_port()) for n in ("a", "b")}
        self.procs = {}

    def conf(self, node: str, master: str | None):
        port, ha_port = self.ports[node]
        props = {
            "brokerClusterName": "C",
            "brokerName": "broker-a",
            "brokerId": 0 if master is None else 1,
            "brokerRole": "SYNC_MASTER" if master is None else "SLAVE",
            "flushDiskType": "SYNC_FLUSH",
            "storePathRootDir": self.tmp / f"store-{node}",
            "listenPort": port,
            "haListenPort": ha_port,
            "namesrvAddr": self.ns.addr,
            "nodeName": node,
            "mappedFileSizeCommitLog": 256 * 1024,  # several files per round: rolls are covered
            "haSendHeartbeatInterval": 500,
            "slaveSyncIntervalMs": 300,
            **self.extra,
        }
        if master is not None:
            props["haMasterAddress"] = f"127.0.0.1:{self.ports[master][1]}"
        return write_broker_conf(self.tmp / f"{node}.conf", props)

    def start(self, node: str, master: str | None = None):
        proc = start_broker(node, self.conf(node, master), self.ports[node][0], self.tmp)
        self.procs[node] = proc
        return proc

    def addr(self, node: str) -> str:
        return f"127.0.0.1:{self.ports[node][0]}"

    def log_text(self, node: str) -> str:
        return (self.tmp / f"{node}.log").read_text(errors="replace")

    def close(self):
        for p in [*self.procs.values(), self.ns]:
            p.kill()


def _status(addr: str) -> dict:
    return asyncio.run(ha_status([addr]))[0]


def _wait_in_sync(pair: Pair, master: str, slave: str, what: str) -> None:
    """Wait until every slave of ``master`` acknowledged its whole log; on a timeout say what
    the master reported and show both nodes' log tails."""
    try:
        _wait(lambda: _in_sync(pair.addr(master)), what=what)
    except AssertionError as exc:
        tails = {n: pair.log_text(n)[-3000:] for n in (master, slave)}
        raise AssertionError(f"{exc}; status {_status(pair.addr(master))}; logs {tails}") from exc


def _in_sync(master_addr: str) -> bool:
    st = _status(master_addr)
    slaves = st.get("slaves") or []
    return bool(slaves) and all(s["ackOffset"] == st["maxOffset"] for s in slaves)


class Load:
    """``PRODUCERS`` asyncio producers in a thread, sending until stopped; keeps what was
    acknowledged SEND_OK with its body."""

    def __init__(self, namesrv: str, label: str):
        self.namesrv, self.label = namesrv, label
        self.acked: list = []
        self.failed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def start(self):
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop(self):
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the load thread did not stop"

    async def _one(self, p: int):
        producer = Producer(f"PG{p}", [self.namesrv], retry_times=0)
        try:
            i = 0
            while not self._stop.is_set():
                i += 1
                body = f"{self.label}-p{p}-{i}|".encode() * (5 + i % 40)
                try:
                    res = await producer.send(TOPIC, body, keys=f"{self.label}-p{p}-{i}")
                except Exception:  # noqa: BLE001 - the master died under us: not acknowledged
                    self.failed += 1
                    await asyncio.sleep(0.02)  # back off a refused connection, not a sync point
                    continue
                if res.status is SendStatus.SEND_OK:
                    with self._lock:
                        self.acked.append((res, body, f"{self.label}-p{p}-{i}"))
                else:
                    self.failed += 1
        finally:
            await producer.close()

    async def _main(self):
        await asyncio.gather(*(self._one(p) for p in range(PRODUCERS)))


async def _check_acked(addr: str, acked: list) -> None:
    """Every acknowledged message at its queue offset on ``addr``, byte for byte."""
    client = RemotingClient()
    try:
        for sent, body, key in acked:
            req = RemotingCommand.request(
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "check",
                    "topic": TOPIC,
                    "queueId": sent.queue.queue_id,
                    "queueOffset": sent.queue_offset,
                    "maxMsgNums": 1,
                    "sysFlag": 0,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                },
            )
            resp = await client.invoke(addr, req, 10_000)
            where = f"{key} at {sent.queue.queue_id}/{sent.queue_offset} on {addr}"
            assert resp.code == ResponseCode.SUCCESS, f"{where}: code {resp.code} {resp.remark}"
            rec = decode_record(resp.body, 0)
            assert rec.body == body, f"{where}: body differs"
            assert rec.properties.get("KEYS") == key, f"{where}: keys differ"
    finally:
        await client.close()


async def _warm_up(namesrv: str) -> None:
    producer = Producer("PGW", [namesrv], retry_times=2)
    try:
        res = await producer.send(TOPIC, b"warm-up")
        assert res.status is SendStatus.SEND_OK, res
    finally:
        await producer.close()


def _log_bytes(store_dir, end: int) -> bytes:
    files = sorted((store_dir / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files)[:end]


def _run_rounds(tmp_path, rounds: int, **extra) -> list[dict]:
    pair = Pair(tmp_path, **extra)
    figures = []
    try:
        master, slave = "a", "b"
        pair.start(master)
        pair.start(slave, master=master)
        epoch = 1
        # The first send auto-creates the topic on the master; wait until the slave has copied
        # its config (SlaveSynchronize) — until then a promoted slave answers TOPIC_NOT_EXIST for
        # messages it holds (test_promoted_slave_without_the_topic_config_serves_its_messages).
        _wait_in_sync(pair, master, slave, "slave in sync")
        asyncio.run(_warm_up(pair.ns.addr))
        _wait(lambda: knows_topic(pair.addr(slave), TOPIC), what="topic config copied to the slave")
        for r in range(rounds):
            s_addr = pair.addr(slave)
            _wait_in_sync(pair, master, slave, f"round {r}: {slave} in sync")
            load = Load(pair.ns.addr, f"r{r}")
            t0 = time.monotonic()
            load.start()
            try:
                kill_after = ACKED_BEFORE_KILL + (r * 137) % 300  # a different point each round
                _wait(lambda ld=load, k=kill_after: ld.count() >= k, what=f"round {r}: load")
                pair.procs[master].kill()  # -9 under load: no flush, no goodbye
                killed_at = time.monotonic()
            finally:
                load.stop()
            acked = load.acked
            assert len(acked) >= ACKED_BEFORE_KILL
            done = asyncio.run(
                promote("broker-a", slave, namesrv_addrs=[pair.ns.addr], broker_addrs=[s_addr])
            )
            promoted_at = time.monotonic()
            epoch += 1
            assert done["master"] == slave and done["epoch"] == epoch, done
            new_end = _status(s_addr)["maxOffset"]
            asyncio.run(_check_acked(s_addr, acked))

            # The old master's store after the crash, then its rejoin as the new slave.
            old_end = len(
                b"".join(
                    f.read_bytes()
                    for f in sorted((tmp_path / f"store-{master}" / "commitlog").iterdir())
                ).rstrip(b"\0")
            )
            log_mark = len(pair.log_text(master))
            pair.start(master, master=slave)
            _wait_in_sync(pair, slave, master, f"round {r}: {master} rejoined and in sync")
            rejoined = pair.log_text(master)[log_mark:]
            # a record the kill cut in half is dropped by the restart's recovery before any
            # truncation: what is left to truncate ends where the dropped bytes start
            torn = re.search(r"commit log recovery: dropping \d+ bytes \[(\d+), (\d+)\)", rejoined)
            if torn:
                assert int(torn.group(2)) == old_end, (old_end, torn.group(0))
            recovered_end = int(torn.group(1)) if torn else old_end
            if recovered_end > new_end:
                assert "truncating the commit log" in rejoined, (old_end, new_end, rejoined[-2000:])
            st_new, st_old = _status(s_addr), _status(pair.addr(master))
            assert st_new["epoch"] == st_old["epoch"] == epoch
            assert st_old["brokerRole"] == "SLAVE" and st_new["brokerRole"] == "SYNC_MASTER"
            end = st_new["maxOffset"]
            assert st_old["maxOffset"] == end
            a_log = _log_bytes(tmp_path / f"store-{master}", end)
            b_log = _log_bytes(tmp_path / f"store-{slave}", end)
            assert zlib.crc32(a_log) == zlib.crc32(b_log) and a_log == b_log
            # ... and the log is whole records back to back up to its end: no torn record left
            # by a frame the dead master never finished, no garbage in the middle.
            recs = list(iter_dump(str(tmp_path / f"store-{slave}")))
            assert all(rec.crc_ok for rec in recs)
            assert max(rec.end for rec in recs) == end
            figures.append(
                {
                    "round": r,
                    "acked": len(acked),
                    "failedSends": load.failed,
                    "loadS": round(killed_at - t0, 2),
                    "promoteS": round(promoted_at - killed_at, 2),
                    "truncatedBytes": max(0, old_end - new_end),
                    "epoch": epoch,
                }
            )
            master, slave = slave, master
    finally:
        pair.close()
    print(json.dumps(figures))
    return figures


# 300-byte frames split most records across frames: a slave promoted after the kill may hold
# the first part of a record the master never finished sending.
BATCHES = [pytest.param(32 * 1024, id="batch32k"), pytest.param(300, id="batch300")]


@pytest.mark.parametrize("batch", BATCHES)
def test_kill_master_under_load_promote_rejoin_rounds(tmp_path, batch):
    figures = _run_rounds(tmp_path, ROUNDS_DEFAULT, haTransferBatchSize=batch)
    assert [f["epoch"] for f in figures] == list(range(2, ROUNDS_DEFAULT + 2))


@pytest.mark.stress
@pytest.mark.parametrize("batch", BATCHES)
def test_kill_master_under_load_promote_rejoin_stress(tmp_path, batch):
    figures = _run_rounds(tmp_path, ROUNDS_STRESS, haTransferBatchSize=batch)
    assert len(figures) == ROUNDS_STRESS


@async_test
async def test_promoted_slave_with_a_torn_tail_serves_whole_records(tmp_path):
    """The master died after sending the first part of a record (frames split records): the
    promoted slave must not write its new epoch after half a record."""
    from broker.config import BrokerRole
    from tests.ha.test_failover import node
    from tests.ha.test_replication import put, wait_for

    a = await node(tmp_path, "a", brokerRole="ASYNC_MASTER", nodeName="a")
    b = await node(
        tmp_path,
        "b",
        brokerRole="SLAVE",
        brokerId=1,
        nodeName="b",
        haMasterAddress=f"127.0.0.1:{a.replication.ha.port}",
    )
    try:
        await wait_for(lambda: a.replication.ha.status()["slaves"], what="slave connected")
        for i in range(20):
            await put(a, i)
        whole = a.store.max_phy_offset
        await wait_for(lambda: b.store.max_phy_offset == whole, what="catch-up")
        await b.replication.ha_client.stop()
        res, _ = await put(a, 20, size=2000)
        rec_size = res.wrote_bytes
        torn = a.store.commit_log.read(whole, rec_size // 2)
        b.store.append_raw(whole, torn)  # the first frame of the record, then nothing
        assert b.store.max_phy_offset == whole + rec_size // 2
        await b.failover.become_master(2, BrokerRole.SYNC_MASTER)
        for i in range(21, 25):
            res, _ = await put(b, i)
        b.store.flush_all()
        recs = list(iter_dump(str(tmp_path / "b")))
        assert all(rec.crc_ok for rec in recs)
        assert max(rec.end for rec in recs) == b.store.max_phy_offset
        assert b.role.epoch_entries[-1].start_offset == whole
    finally:
        for n in (b, a):
            await n.stop()


@async_test
async def test_promoted_slave_without_the_topic_config_serves_its_messages(tmp_path):
    from broker.config import BrokerRole
    from broker.store.config_store import topic_config
    from tests.ha.test_failover import node
    from tests.ha.test_replication import put, wait_for

    a = await node(tmp_path, "a", brokerRole="ASYNC_MASTER", nodeName="a")
    b = await node(
        tmp_path,
        "b",
        brokerRole="SLAVE",
        brokerId=1,
        nodeName="b",
        haMasterAddress=f"127.0.0.1:{a.replication.ha.port}",
        slaveSyncIntervalMs=3_600_000,
    )
    try:
        await wait_for(lambda: a.replication.ha.status()["slaves"], what="slave connected")
        a.store.topic_config.put("T", topic_config("T", 4))  # created on the master only
        for i in range(8):
            await put(a, i)
        end = a.store.max_phy_offset
        await wait_for(lambda: b.store.max_phy_offset == end, what="catch-up")
        assert "T" not in b.store.topic_config.table
        await b.failover.become_master(2, BrokerRole.SYNC_MASTER)
        client = RemotingClient()
        try:
            req = RemotingCommand.request(
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "check",
                    "topic": "T",
                    "queueId": 1,
                    "queueOffset": 0,
                    "maxMsgNums": 1,
                    "sysFlag": 0,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                },
            )
            resp = await client.invoke(b.config.broker_addr, req, 10_000)
        finally:
            await client.close()
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    finally:
        for n in (b, a):
            await n.stop()
