"""Issue 28's finding 4 against a real ``haproof broker`` on a 3 MiB tmpfs (SYNC_FLUSH): a full
disk is a refusal, not a SIGBUS. Space for each mapped file is reserved before it is mapped;
when it cannot be, sends get SERVICE_NOT_AVAILABLE (14) and one log line, pulls go on, and
sends resume once space returns; every acknowledged message survives a restart."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from broker.remoting.client import RemotingClient
from broker.remoting.codes import ResponseCode
from tests.acl.helpers import pull, send_v2
from tools.localcluster import LocalProcess, free_port, start_broker, write_broker_conf

BODY = bytes(range(256)) * 16  # 4 KiB
FILLER_BYTES = 1 << 20


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    if done.returncode != 0:
        pytest.skip(f"mounting a 3 MiB tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def _start(tmp_path: Path, disk: Path, port: int) -> LocalProcess:
    conf = write_broker_conf(
        tmp_path / "broker.conf",
        {
            "brokerClusterName": "C",
            "brokerName": "broker-a",
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "SYNC_FLUSH",
            "storePathRootDir": disk / "store",
            "listenPort": port,
            "haListenPort": free_port(),
            "mappedFileSizeCommitLog": 256 * 1024,
            "mappedFileSizeConsumeQueue": 20 * 1000,
        },
    )
    return start_broker("broker", conf, port, tmp_path)


async def _send_until_refused(client, addr: str, limit: int) -> tuple[int, object]:
    for i in range(limit):
        resp = await client.invoke(addr, send_v2("Full", BODY), 10_000)
        if resp.code != ResponseCode.SUCCESS:
            return i, resp
    raise AssertionError(f"{limit} sends of 4 KiB all fit a 3 MiB disk")


async def _pulled(client, addr: str, offset: int = 0) -> int:
    resp = await client.invoke(addr, pull("Full", offset=offset), 10_000)
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    return int(resp.ext_fields["nextBeginOffset"]) - offset


def test_a_full_disk_refuses_sends_keeps_reads_and_resumes(tmp_path, small_disk):
    filler = small_disk / "filler"
    filler.write_bytes(b"\xab" * FILLER_BYTES)  # room the test gives back later
    port = free_port()
    proc = _start(tmp_path, small_disk, port)
    try:

        async def full() -> int:
            client = RemotingClient()
            try:
                acked, refused = await _send_until_refused(client, proc.addr, 1000)
                assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused.remark
                assert "disk is full" in refused.remark
                again = await client.invoke(proc.addr, send_v2("Full", BODY), 10_000)
                assert again.code == ResponseCode.SERVICE_NOT_AVAILABLE
                assert proc.alive()
                assert await _pulled(client, proc.addr) > 0  # reads go on
                os.unlink(filler)  # space returns
                ok = await client.invoke(proc.addr, send_v2("Full", BODY), 10_000)
                assert ok.code == ResponseCode.SUCCESS, ok.remark
                return acked + 1
            finally:
                await client.close()

        acked = asyncio.run(full())
        log = proc.log_path.read_text()
        assert log.count("disk full: refusing sends") == 1, log[-3000:]
        assert "disk space is back" in log
        assert proc.stop() == 0
    finally:
        proc.kill()
    proc = _start(tmp_path, small_disk, port)
    try:

        async def count() -> int:
            client = RemotingClient()
            try:
                total = 0
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    resp = await client.invoke(proc.addr, pull("Full", offset=total), 10_000)
                    if resp.code != ResponseCode.SUCCESS:  # past the end: no new message
                        assert int(resp.ext_fields["maxOffset"]) == total, resp.remark
                        return total
                    total = int(resp.ext_fields["nextBeginOffset"])
                raise AssertionError("pulling did not reach the queue's end")
            finally:
                await client.close()

        assert asyncio.run(count()) == acked
    finally:
        proc.stop()


def test_reserved_files_are_not_sparse(tmp_path):
    from broker.store.mapped_file import MappedFile

    path = tmp_path / f"{0:020d}"
    mf = MappedFile.open(str(path), 1 << 20)
    try:
        assert os.stat(path).st_blocks * 512 >= 1 << 20
    finally:
        mf.close()
