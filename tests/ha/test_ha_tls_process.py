"""The HA stream over TLS when remoting enforces it (tlsMode=enforcing), with real processes on
127.0.0.1: the master's HA listener serves TLS only with remoting's certificate, the slave
connects with remoting's trust certificate and replicates every byte; a plain connection to the
HA port gets nothing and is closed.

``test_replication_throughput_tls_vs_plain`` (stress) measures a slave catching up on a master's
log with and without TLS: docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time

import pytest

from broker.client.producer import Producer, SendStatus
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.tls import client_context
from tests.support.cluster import conf_factory
from tests.support.tls_certs import make_cert
from tests.support.waiting import wait_for
from tools.localcluster import LocalProcess, free_port, process_cpu_s, start_broker

_conf = conf_factory(haSendHeartbeatInterval=500, haHousekeepingInterval=5000)


def _tls_keys(cert: tuple[str, str]) -> dict:
    return {
        "tlsMode": "enforcing",
        "tlsServerCertPath": cert[0],
        "tlsServerKeyPath": cert[1],
        "tlsEnable": "true",  # the node's own connections (registration, slave sync) too
        "tlsClientTrustCertPath": cert[0],
    }


class Group:
    """A name server (TLS and plain), a master and, on ``start_slave``, a slave."""

    def __init__(self, tmp_path, tls: bool, **extra) -> None:
        self.tmp, self.procs = tmp_path, []
        self.cert = make_cert(tmp_path)
        self.keys = {**(_tls_keys(self.cert) if tls else {}), **extra}
        self.trust = client_context(self.cert[0]) if tls else None
        ns_port = free_port()
        flags = ["--tls-mode", "permissive", "--tls-cert", self.cert[0], "--tls-key", self.cert[1]]
        args = ["namesrv", "--host", "127.0.0.1", "--listen-port", str(ns_port), *flags]
        self.ns = LocalProcess.start("namesrv", args, ns_port, tmp_path / "namesrv.log")
        self.procs.append(self.ns)
        self.m_port, self.m_ha = free_port(), free_port()
        conf = _conf(
            tmp_path, "m", 0, "ASYNC_MASTER", self.m_port, self.m_ha, self.ns.addr, **self.keys
        )
        self.master = start_broker("m", conf, self.m_port, tmp_path)
        self.procs.append(self.master)

    def start_slave(self) -> LocalProcess:
        port, ha = free_port(), free_port()
        conf = _conf(
            self.tmp,
            "s",
            1,
            "SLAVE",
            port,
            ha,
            self.ns.addr,
            haMasterAddress=f"127.0.0.1:{self.m_ha}",
            **self.keys,
        )
        self.procs.append(start_broker("s", conf, port, self.tmp))
        return self.procs[-1]

    def close(self) -> None:
        for p in self.procs:
            p.kill()

    async def status(self, client: RemotingClient) -> dict:
        req = RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS)
        resp = await client.invoke(self.master.addr, req, 5000)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return json.loads(resp.body)

    async def status_once(self) -> dict:
        client = RemotingClient(ssl=self.trust)
        try:
            return await self.status(client)
        finally:
            await client.close()

    async def send(self, messages: int, body: bytes, senders: int = 4) -> int:
        """``messages`` acknowledged sends to the master; the master's log end after them."""
        producers = [Producer("PG", [self.ns.addr]) for _ in range(senders)]
        for p in producers:
            p.client = RemotingClient(ssl=self.trust)  # the test client trusts the cert
        try:

            async def one(p: Producer, n: int) -> None:
                for _ in range(n):
                    assert (await p.send("TlsTopic", body)).status == SendStatus.SEND_OK

            await asyncio.gather(*(one(p, messages // senders) for p in producers))
        finally:
            for p in producers:
                await p.close()
        return (await self.status_once())["masterMaxOffset"]

    async def caught_up_s(self, end: int, timeout_ms: int = 120_000) -> float:
        """Seconds until a slave acknowledged the master's log up to ``end``."""
        client = RemotingClient(ssl=self.trust)
        started = time.monotonic()

        async def done() -> bool:
            slaves = (await self.status(client)).get("slaves") or []
            return any(s["ackOffset"] >= end for s in slaves)

        try:
            await wait_for(done, timeout_ms, what=f"a slave at {end}", every_ms=20)
        finally:
            await client.close()
        return time.monotonic() - started


def _plain_gets_nothing(port: int) -> bytes:
    """A plain peer's report of offset 0 to the HA port: what it receives before the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">q", 0))
        sock.settimeout(10)
        got = b""
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return got


def test_replication_over_tls_and_a_plain_peer_is_refused(tmp_path):
    g = Group(tmp_path, tls=True)
    try:
        end = asyncio.run(g.send(200, b"tls-replicated " * 8))
        g.start_slave()
        asyncio.run(g.caught_up_s(end, 60_000))
        assert "(TLS only)" in (tmp_path / "m.log").read_text()
        assert _plain_gets_nothing(g.m_ha) == b""  # the TLS handshake failed: never served
        # a TLS client that trusts the certificate gets through the handshake
        with socket.create_connection(("127.0.0.1", g.m_ha), timeout=5) as raw:
            with g.trust.wrap_socket(raw, server_hostname="127.0.0.1") as tls_sock:
                assert tls_sock.version() in ("TLSv1.2", "TLSv1.3")
        # one slave in the master's status: the plain peer never became a connection
        assert len(asyncio.run(g.status_once())["slaves"]) == 1
    finally:
        g.close()
    m = (tmp_path / "store-m" / "commitlog").iterdir()
    for f in m:  # byte for byte what the master holds
        assert (tmp_path / "store-s" / "commitlog" / f.name).read_bytes() == f.read_bytes()


def test_a_plain_slave_is_refused_by_an_enforcing_master(tmp_path):
    g = Group(tmp_path, tls=True)
    try:
        end = asyncio.run(g.send(20, b"x" * 100))
        port, ha = free_port(), free_port()  # a slave without the TLS keys: plain HA
        conf = _conf(
            tmp_path, "s", 1, "SLAVE", port, ha, g.ns.addr, haMasterAddress=f"127.0.0.1:{g.m_ha}"
        )
        g.procs.append(start_broker("s", conf, port, tmp_path))
        with pytest.raises(AssertionError, match="a slave at"):
            asyncio.run(g.caught_up_s(end, 3_000))
    finally:
        g.close()
    assert not (tmp_path / "store-s" / "commitlog").exists() or all(
        f.read_bytes().count(0) == f.stat().st_size
        for f in (tmp_path / "store-s" / "commitlog").iterdir()
    )


@pytest.mark.stress
@pytest.mark.parametrize("tls", [False, True])
def test_replication_throughput_tls_vs_plain(tmp_path, tls):
    """A slave catching up on 64 MiB of a master's log (figures: docs/benchmarks.md)."""
    g = Group(tmp_path, tls=tls, mappedFileSizeCommitLog=128 * 1024 * 1024)
    try:
        end = asyncio.run(g.send(16_384, b"b" * 4000, senders=8))
        master_cpu = process_cpu_s(g.master.proc.pid)
        slave = g.start_slave()
        slave_cpu = process_cpu_s(slave.proc.pid)
        seconds = asyncio.run(g.caught_up_s(end, 600_000))
        master_cpu = process_cpu_s(g.master.proc.pid) - master_cpu
        slave_cpu = process_cpu_s(slave.proc.pid) - slave_cpu
    finally:
        g.close()
    mib = end / 2**20
    print(
        f"\nHA catch-up tls={tls}: {mib:.1f} MiB in {seconds:.2f} s = {mib / seconds:.1f} MiB/s; "
        f"CPU ms per MiB: master {1000 * master_cpu / mib:.1f}, "
        f"slave {1000 * slave_cpu / mib:.1f}"
    )
