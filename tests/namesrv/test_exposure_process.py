"""Issue 28's finding 5 against real ``haproof namesrv`` / ``haproof broker`` processes: both
listen on 127.0.0.1 unless told otherwise, and refuse (exit 2, one line) to listen beyond
loopback without ACL unless ``insecure`` says so; with ACL an anonymous REGISTER_BROKER or
UNREGISTER_BROKER changes no route."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.acl.acl_files import write_acl
from tools.localcluster import LocalProcess, free_port, write_broker_conf

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_name_server_listens_on_loopback_by_default_and_refuses_to_be_open(tmp_path):
    port = free_port()
    proc = LocalProcess.start(
        "namesrv", ["namesrv", "--listen-port", str(port)], port, tmp_path / "ns.log"
    )
    try:
        assert f"namesrv listening on 127.0.0.1:{port}" in proc.log_path.read_text()
    finally:
        proc.stop()
    refused = _run("namesrv", "--host", "0.0.0.0", "--listen-port", str(free_port()))
    assert refused.returncode == 2
    assert "beyond loopback" in _one_line(refused.stderr)


def test_broker_refuses_to_listen_beyond_loopback_without_acl(tmp_path):
    conf = write_broker_conf(
        tmp_path / "b.conf",
        {
            "brokerName": "broker-a",
            "storePathRootDir": tmp_path / "store",
            "listenPort": free_port(),
            "listenHost": "0.0.0.0",
        },
    )
    for args in (["broker", "-c", str(conf)], ["broker", "-c", str(conf), "--check-config"]):
        r = _run(*args)
        assert r.returncode == 2, r.stderr
        line = _one_line(r.stderr)
        assert "listenHost" in line and "beyond loopback" in line, line
    assert not (tmp_path / "store").exists()
    safe = write_broker_conf(
        tmp_path / "s.conf",
        {
            "brokerName": "broker-a",
            "storePathRootDir": tmp_path / "store",
            "listenPort": free_port(),
        },
    )
    r = _run("broker", "-c", str(safe), "--host", "0.0.0.0")
    assert r.returncode == 2 and "beyond loopback" in _one_line(r.stderr), r.stderr
    ok = _run("broker", "-c", str(safe), "--check-config")
    assert ok.returncode == 0, ok.stderr


def test_with_acl_anonymous_route_changes_are_refused(tmp_path):
    port = free_port()
    acl = write_acl(tmp_path)
    proc = LocalProcess.start(
        "namesrv",
        ["namesrv", "--listen-port", str(port), "--acl-file", str(acl)],
        port,
        tmp_path / "ns.log",
    )

    async def main():
        client = RemotingClient()
        try:
            register = RemotingCommand.request(
                RequestCode.REGISTER_BROKER,
                {
                    "brokerAddr": "6.6.6.6:10911",
                    "brokerName": "evil",
                    "clusterName": "C",
                    "brokerId": 0,
                    "haServerAddr": "6.6.6.6:10912",
                },
                json.dumps({"topicConfigTable": {"Orders": {"topicName": "Orders"}}}).encode(),
            )
            resp = await client.invoke(proc.addr, register, 5000)
            assert resp.code == ResponseCode.NO_PERMISSION, resp.remark
            unregister = RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER,
                {
                    "brokerAddr": "6.6.6.6:10911",
                    "brokerName": "evil",
                    "clusterName": "C",
                    "brokerId": 0,
                },
            )
            resp = await client.invoke(proc.addr, unregister, 5000)
            assert resp.code == ResponseCode.NO_PERMISSION, resp.remark
        finally:
            await client.close()

    try:
        asyncio.run(main())
    finally:
        proc.stop()
