"""Real controller processes on 127.0.0.1 and a scripted broker speaking the controller
protocol through broker/remoting's client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode as Q
from broker.remoting.command import RemotingCommand
from tests.conftest import wait_until
from tools.localcluster import free_port

C, B = "DefaultCluster", "broker-a"


class Proc:
    def __init__(self, args: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self.log_file = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker.cli", *args],
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.log_file.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()
        if not self.log_file.closed:
            self.log_file.close()


class _Loop:
    """One event loop in a thread for the test's clients: a broker's connection stays open
    between its heartbeats (a closed channel makes it not alive, as in RocketMQ)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.clients: dict[object, RemotingClient] = {}

    def run(self, coro, timeout_s: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)


_LOOP = _Loop()


def call(
    addr: str,
    code: int,
    fields: dict | None = None,
    body=None,
    timeout_ms: int = 5000,
    session: object = None,
):
    """One request (over ``session``'s connection, kept open; a fresh one without):
    (code, ext_fields, decoded body or None)."""

    async def go():
        client = _LOOP.clients.get(session) if session is not None else None
        if client is None:
            client = RemotingClient()
            if session is not None:
                _LOOP.clients[session] = client
        try:
            raw = b"" if body is None else json.dumps(body).encode()
            resp = await client.invoke(
                addr, RemotingCommand.request(code, fields or {}, raw), timeout_ms
            )
            return resp.code, resp.ext_fields, json.loads(resp.body) if resp.body else None
        finally:
            if session is None:
                await client.close()

    return _LOOP.run(go())


def close_session(session: object) -> None:
    client = _LOOP.clients.pop(session, None)
    if client is not None:
        _LOOP.run(client.close())


def answers(addr: str) -> bool:
    try:
        call(addr, Q.CONTROLLER_GET_METADATA_INFO, timeout_ms=1000)
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def start_controller(tmp: Path, name: str, port: int, extra: str = "") -> Proc:
    """A controller for the tests' scripted brokers, which beat with timeouts of up to 60 s."""
    conf = tmp / f"{name}.conf"
    conf.write_text(
        f"listenPort={port}\ncontrollerStorePath={tmp / name}\n"
        "scanNotActiveBrokerInterval=200\nscanInactiveMasterInterval=200\n"
        f"brokerHeartbeatTimeoutMaxMs=60000\n{extra}"
    )
    proc = Proc(["controller", "-c", str(conf)], tmp / f"{name}.log")
    return proc


def raft_keys(addrs: list[str], raft: list[str], i: int) -> str:
    """Controller ``i``'s keys of a Raft group (its RPC addresses ``addrs``, Raft addresses
    ``raft``; no Raft addresses: a single controller, no keys)."""
    if not raft:
        return ""
    return (
        f"controllerType=jRaft\njRaftInitConf={','.join(raft)}\njRaftControllerRPCAddr="
        f"{','.join(addrs)}\njRaftElectionTimeoutMs=1000\njRaftServerId={raft[i]}\n"
    )


def start_raft_controllers(tmp: Path, procs: list, n: int = 3) -> list[str]:
    """``n`` controllers on PySyncObj's Raft (``r0``...; appended to ``procs``), each
    answering; their RPC addresses."""
    raft = [f"127.0.0.1:{free_port()}" for _ in range(n)]
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(n)]
    for i, addr in enumerate(addrs):
        port = int(addr.rpartition(":")[2])
        procs.append(start_controller(tmp, f"r{i}", port, raft_keys(addrs, raft, i)))
    for addr in addrs:
        wait_answering(addr)
    return addrs


def beat(addr: str, bid: int, epoch: int = 0, offset: int = 0, timeout_ms: int = 1000):
    return call(
        addr,
        Q.BROKER_HEARTBEAT,
        {
            "clusterName": C,
            "brokerName": B,
            "brokerAddr": f"127.0.0.1:{10910 + bid}",
            "brokerId": bid,
            "epoch": epoch,
            "maxOffset": offset,
            "confirmOffset": offset,
            "heartbeatTimeoutMills": timeout_ms,
        },
        session=(addr, bid),
    )[0]


def join(addr: str, bid_expected: int) -> int:
    code, hdr, _ = call(addr, Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B})
    assert code == 0 and int(hdr["nextBrokerId"]) == bid_expected
    bid = int(hdr["nextBrokerId"])
    code, _, _ = call(
        addr,
        Q.CONTROLLER_APPLY_BROKER_ID,
        {
            "clusterName": C,
            "brokerName": B,
            "appliedBrokerId": bid,
            "registerCheckCode": f"127.0.0.1:{10910 + bid};{bid}",
        },
    )
    assert code == 0
    code, _, _ = call(
        addr,
        Q.CONTROLLER_REGISTER_BROKER,
        {
            "clusterName": C,
            "brokerName": B,
            "brokerId": bid,
            "brokerAddress": f"127.0.0.1:{10910 + bid}",
        },
    )
    assert code == 0
    return bid


def replica_info(addr: str):
    return call(addr, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})


def wait_answering(addr: str, timeout_s: float = 20) -> None:
    wait_until(lambda: answers(addr), timeout_s, f"controller {addr} answering", every_s=0.1)
