"""Each mistake a new user makes gets one line naming what and where (exit 2 for unusable
input), never a traceback; and the broker refuses to serve what would lose acknowledged data."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.consumer_offsets import ConsumerOffsetManager
from contracts.record.model import Message
from tools.localcluster import LocalProcess, free_port


def _haproof(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def _conf(tmp_path: Path, store: Path, **extra) -> Path:
    props = {
        "brokerName": "broker-a",
        "storePathRootDir": store,
        "listenPort": free_port(),
        "mappedFileSizeCommitLog": 64 * 1024,
        **extra,
    }
    path = tmp_path / "broker.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    for needle in needles:
        assert needle in line, (needle, line)
    return line


@contextlib.contextmanager
def _immutable(path: Path):
    """``chattr +i``: not even root may create files in ``path`` (how these tests, run as root,
    get a directory the broker cannot write)."""
    r = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"chattr +i unavailable here: {r.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_namesrv_addr_that_is_not_an_address(tmp_path) -> None:
    conf = _conf(tmp_path, tmp_path / "store", namesrvAddr="not-an-addr")
    r = _haproof("broker", "-c", str(conf))
    _one_line_error(r, f"{conf}:5: namesrvAddr=", "'not-an-addr' is not host:port")


def test_store_directory_the_broker_cannot_create_or_lock(tmp_path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    conf = _conf(tmp_path, parent / "store")
    with _immutable(parent):
        r = _haproof("broker", "-c", str(conf))
    _one_line_error(r, "store directory", str(parent / "store"), "cannot create or lock")


def test_config_directory_not_writable_stops_the_node_and_leaves_no_abort(tmp_path) -> None:
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    conf = _conf(tmp_path, store)
    with _immutable(store / "config"):
        r = _haproof("broker", "-c", str(conf))
    _one_line_error(r, f"{store / 'config'}: not writable")
    assert not (store / "abort").exists()  # nothing claims a crash that did not happen


def test_archive_root_that_cannot_be_created(tmp_path) -> None:
    (tmp_path / "st" / "commitlog").mkdir(parents=True)
    (tmp_path / "st" / "commitlog" / ("0" * 20)).write_bytes(bytes(4096))
    (tmp_path / "afile").write_text("")
    base = ["archive", "--store-dir", str(tmp_path / "st"), "--cluster", "C"]
    base += ["--broker-name", "b", "--node", "n"]
    r = _haproof(*base, "--root", f"file://{tmp_path}/afile/sub")
    _one_line_error(r, "archive root", "afile/sub", "Not a directory")
    (tmp_path / "imm").mkdir()
    with _immutable(tmp_path / "imm"):
        r = _haproof(*base, "--root", f"file://{tmp_path}/imm/root")
    _one_line_error(r, "archive root", "imm/root", "not permitted")


def test_store_dump_into_a_closed_pipe_is_quiet(tmp_path) -> None:
    from broker.config import BrokerConfig
    from broker.store.message_store import MessageStore

    cfg = BrokerConfig(
        store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1 << 20
    )
    store = MessageStore.open(cfg)
    for i in range(2000):
        store.put_message(Message("t", b"x" * 100 + str(i).encode()))
    store.shutdown()
    # `haproof store dump STORE | head -1`
    dump = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "store", "dump", str(tmp_path / "store")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert json.loads(dump.stdout.readline())["physicalOffset"] == 0
    dump.stdout.close()
    _, err = dump.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err
    assert dump.returncode == 0


async def _call(addr: str, code: RequestCode, fields: dict) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields), 5000)
    finally:
        await client.close()


def _start(tmp_path: Path, conf: Path, *extra: str) -> LocalProcess:
    port = int(dict(line.split("=", 1) for line in conf.read_text().split())["listenPort"])
    args = ["broker", "-c", str(conf), "--host", "127.0.0.1", *extra]
    return LocalProcess.start("b", args, port, tmp_path / "b.log")


def test_commit_beyond_the_queue_is_refused_and_logged(tmp_path) -> None:
    conf = _conf(tmp_path, tmp_path / "store")
    b = _start(tmp_path, conf)
    try:
        for _ in range(125):
            send = {
                "producerGroup": "PG",
                "topic": "T",
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 1,
                "queueId": 0,
                "sysFlag": 0,
                "bornTimestamp": 0,
                "flag": 0,
                "properties": "",
                "reconsumeTimes": 0,
            }
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE, send, b"body")
            resp = asyncio.run(_invoke(b.addr, req))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        commit = {"consumerGroup": "CG", "topic": "T", "queueId": 0}
        ok = asyncio.run(
            _call(b.addr, RequestCode.UPDATE_CONSUMER_OFFSET, {**commit, "commitOffset": 100})
        )
        assert ok.code == ResponseCode.SUCCESS
        far = asyncio.run(
            _call(b.addr, RequestCode.UPDATE_CONSUMER_OFFSET, {**commit, "commitOffset": 10**15})
        )
        assert far.code == ResponseCode.SYSTEM_ERROR and "max offset 125" in far.remark
        q = asyncio.run(_call(b.addr, RequestCode.QUERY_CONSUMER_OFFSET, commit))
        assert int(q.ext_fields["offset"]) == 100
        assert "UPDATE_CONSUMER_OFFSET from" in (tmp_path / "b.log").read_text()
    finally:
        b.kill()


async def _invoke(addr: str, req: RemotingCommand) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, req, 5000)
    finally:
        await client.close()


def test_damaged_offsets_file_refuses_to_start_unless_the_loss_is_accepted(tmp_path) -> None:
    store = tmp_path / "store"
    conf = _conf(tmp_path, store, brokerClusterName="C", archiveRoot="file:///archive")
    path = store / "config" / "consumerOffset.json"
    t = ConsumerOffsetManager(str(path))
    t.merge_forward({"offsetTable": {"T@CG": {"0": 7}}})
    t.persist()
    path.write_text("garbage")
    (store / "config" / "consumerOffset.json.bak").write_text("{}")  # an old, empty backup
    r = _haproof("broker", "-c", str(conf))
    line = _one_line_error(r, str(path), "refusing to start", "a slave's copy")
    assert "file:///archive/v1/C/broker-a/broker-a-0/snapshots/" in line
    assert "--accept-offset-loss" in line
    assert path.read_text() == "garbage"  # evidence left as found
    b = _start(tmp_path, conf, "--accept-offset-loss")
    try:
        q = asyncio.run(
            _call(
                b.addr,
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": "CG", "topic": "T", "queueId": 0},
            )
        )
        assert q.code == ResponseCode.SUCCESS and int(q.ext_fields["offset"]) == 0
    finally:
        b.stop()
    assert "--accept-offset-loss: serving" in (tmp_path / "b.log").read_text()
    assert json.loads(path.read_text())["generation"] >= 1  # written whole again at the stop
    assert os.path.exists(str(path) + ".bak")
