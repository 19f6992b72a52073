"""A flipped byte loses no acknowledged message, over real processes: a damaged slave
quarantines and refetches from its master; a damaged master refuses to start (one line, nothing
moved), then ``haproof store repair`` keeps every valid record and the node serves again."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import subprocess
import sys

from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.model import Record
from contracts.record.reader import decode_record, scan_records
from tests.conftest import wait_until
from tests.support.cluster import conf_factory
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC = "DamageTopic"
FILE_SIZE = 16 * 1024
N = 160

_conf = conf_factory(mappedFileSizeCommitLog=FILE_SIZE, haSendHeartbeatInterval=500)
_wait = functools.partial(wait_until, timeout_s=60.0)


async def _call(addr: str, code: RequestCode, fields: dict) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields), 5000)
    finally:
        await client.close()


def _queue_tops(addr: str) -> list[int]:
    out = []
    for q in range(4):
        r = asyncio.run(_call(addr, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q}))
        out.append(int(r.ext_fields.get("offset", -1)) if r.code == ResponseCode.SUCCESS else -1)
    return out


async def _send(namesrv: str) -> int:
    producer = Producer("PG", [namesrv], retry_times=2)
    ok = 0
    try:
        for i in range(N):
            res = await producer.send(TOPIC, f"acked-{i:04d}".encode() * 16)
            ok += res.status is SendStatus.SEND_OK
    finally:
        await producer.close()
    return ok


def _log_bytes(store) -> bytes:
    d = os.path.join(store, "commitlog")
    return b"".join(open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)))


def _records(store) -> list[Record]:
    data = _log_bytes(store)
    out, pos = [], 0
    while pos < len(data):
        base = pos - pos % FILE_SIZE
        recs = list(scan_records(data[base : base + FILE_SIZE], base_offset=base, start=pos - base))
        out += [r for r in recs if not r.is_blank]
        if not recs or not recs[-1].is_blank:
            break
        pos = base + FILE_SIZE
    return out


def _flip(store, offset: int) -> None:
    path = os.path.join(store, "commitlog", f"{offset - offset % FILE_SIZE:020d}")
    with open(path, "r+b") as fh:
        fh.seek(offset % FILE_SIZE)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0xFF]))


def _digest(store) -> str:
    return hashlib.sha256(_log_bytes(store)).hexdigest()


def test_damaged_slave_refetches_and_damaged_master_refuses_then_repairs(tmp_path):
    ns = start_namesrv(tmp_path)
    procs = [ns]
    try:
        (m_port, m_ha), (s_port, s_ha) = (free_port(), free_port()), (free_port(), free_port())
        m_conf = _conf(tmp_path, "m", 0, "SYNC_MASTER", m_port, m_ha, ns.addr)
        s_conf = _conf(
            tmp_path, "s", 1, "SLAVE", s_port, s_ha, ns.addr, haMasterAddress=f"127.0.0.1:{m_ha}"
        )
        m_store, s_store = tmp_path / "store-m", tmp_path / "store-s"
        m = start_broker("m", m_conf, m_port, tmp_path)
        s = start_broker("s", s_conf, s_port, tmp_path)
        procs += [m, s]
        assert asyncio.run(_send(ns.addr)) == N  # SYNC_MASTER: each one is on the slave too
        tops = _queue_tops(m.addr)
        _wait(lambda: _queue_tops(s.addr) == tops, what="the slave caught up")
        s.stop()
        m.stop()
        records = _records(m_store)
        assert len(records) == N and _log_bytes(m_store) == _log_bytes(s_store)

        # -- the slave: a flipped byte mid-log; it keeps the bytes aside and refetches them
        victim = records[N - 40]
        _flip(s_store, victim.physical_offset + 4)  # its magic code
        m = start_broker("m", m_conf, m_port, tmp_path)
        s = start_broker("s", _archived(s_conf, tmp_path), s_port, tmp_path)
        procs += [m, s]
        _wait(lambda: _queue_tops(s.addr) == tops, what="the slave refetched from the damage")
        _wait(lambda: _events(tmp_path, "s"), what="the slave's recovered event")
        s.stop()
        m.stop()
        assert _log_bytes(s_store) == _log_bytes(m_store)  # byte for byte the master's again
        side = list((s_store / "quarantine").glob("*.bin"))
        assert [p.name for p in side] == [
            f"{victim.physical_offset:020d}-{records[-1].end:020d}.bin"
        ]
        assert "refetches" in (tmp_path / "s.log").read_text()
        assert json.loads(side[0].with_suffix(".json").read_text())["reported"]  # reported once
        (event,) = _events(tmp_path, "s")  # the audit sees the range
        assert (event["damagedFrom"], event["damagedTo"]) == (
            victim.physical_offset,
            records[-1].end,
        )
        assert (event["from"], event["to"], event["action"]) == (
            records[-1].end,
            victim.physical_offset,
            "refetch",
        )

        # -- the master: a flipped size byte; it refuses, names the range, moves nothing
        victim = records[N - 30]
        _flip(m_store, victim.physical_offset + 1)
        before = _digest(m_store)
        r = subprocess.run(
            [sys.executable, "-m", "broker.cli", "broker", "-c", str(m_conf)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2 and "Traceback" not in r.stderr
        line = r.stderr.strip().splitlines()[-1]
        assert f"damaged commit log at offset {victim.physical_offset}" in line
        assert f"[{victim.physical_offset}, {victim.end})" in line
        assert _digest(m_store) == before and not (m_store / "quarantine").exists()

        # -- the operator repairs: the damaged record goes aside, every other one is served
        r = subprocess.run(
            [sys.executable, "-m", "broker.cli", "store", "repair", str(m_store)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        m = start_broker("m", _archived(m_conf, tmp_path), m_port, tmp_path)
        procs.append(m)
        assert _queue_tops(m.addr) == tops  # nothing after the damage was dropped
        _wait(lambda: _events(tmp_path, "m"), what="the master's recovered event")
        (event,) = _events(tmp_path, "m")
        assert (event["damagedFrom"], event["damagedTo"], event["action"]) == (
            victim.physical_offset,
            victim.end,
            "repair",
        )
        bodies = _pull_all(m.addr, tops)
        expected = {r.body for r in records} - {victim.body}
        assert bodies == expected
    finally:
        for p in procs:
            p.kill()


def _archived(conf, tmp_path):
    """The same node, now archiving to a file:// root (events land as files)."""
    text = conf.read_text() + (
        f"archiveEnable=true\narchiveRoot=file://{tmp_path}/archive\narchiveIntervalMs=200\n"
    )
    out = conf.with_name(conf.stem + "-archived.conf")
    out.write_text(text)
    return out


def _events(tmp_path, node: str, kind: str = "recovered") -> list[dict]:
    d = tmp_path / "archive" / "v1" / "C" / "broker-a" / node / "events"
    if not d.is_dir():
        return []
    return [json.loads(p.read_text()) for p in sorted(d.rglob(f"*-{kind}.json"))]


def _pull_all(addr: str, tops: list[int]) -> set[bytes]:
    async def pull(q: int) -> list[bytes]:
        out, offset = [], 0
        client = RemotingClient()
        try:
            while offset < tops[q]:
                fields = {
                    "consumerGroup": "CG",
                    "topic": TOPIC,
                    "queueId": q,
                    "queueOffset": offset,
                    "maxMsgNums": 32,
                    "sysFlag": 0,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                    "subVersion": 0,
                }
                req = RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)
                resp = await client.invoke(addr, req, 5000)
                nxt = int(resp.ext_fields["nextBeginOffset"])
                body = memoryview(resp.body or b"")
                pos = 0
                while pos < len(body):
                    rec = decode_record(body, pos)
                    out.append(rec.body)
                    pos += rec.total_size
                assert nxt > offset, resp.remark
                offset = nxt
        finally:
            await client.close()
        return out

    got: set[bytes] = set()
    for q in range(4):
        got |= set(asyncio.run(pull(q)))
    return got
