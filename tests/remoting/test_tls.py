"""TLS for remoting with a throwaway certificate made here: enforcing serves TLS only,
permissive serves plain and TLS on one port, disabled stays plain; in-process and against a
real name server process on 127.0.0.1."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives import serialization

from broker.config import BrokerConfig
from broker.remoting.client import RemotingClient, connect
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import ConnectionClosedError
from broker.remoting.server import RemotingServer
from broker.remoting.tls import TlsMode, client_context, server_context
from contracts.errors import ConfigError
from tests.support.aio import async_test
from tests.support.tls_certs import make_cert as _make_cert
from tests.support.waiting import wait_for
from tools.localcluster import LocalProcess, free_port


@pytest.fixture
def cert(tmp_path) -> tuple[str, str]:
    return _make_cert(tmp_path)


async def _echo(conn, req):
    tls = conn.transport.get_extra_info("ssl_object") is not None
    return req.make_response(ResponseCode.SUCCESS, ext_fields={"tls": tls})


def _request() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})


async def _ask(port: int, ssl=None) -> str:
    """The server's view of the connection ("True": TLS) or raise ConnectionClosedError."""
    conn = await connect(f"127.0.0.1:{port}", ssl=ssl, timeout_ms=3000)
    try:
        resp = await conn.invoke(_request(), timeout_ms=3000)
        assert resp.code == ResponseCode.SUCCESS
        return resp.ext_fields["tls"]
    finally:
        await conn.close()


def test_enforcing_permissive_and_disabled_in_process(cert, tmp_path) -> None:
    other_cert, _ = _make_cert(tmp_path, cn="127.0.0.2")
    trust = client_context(cert[0])

    async def main() -> None:
        ctx = server_context(*cert)
        enforcing = await RemotingServer(
            {RequestCode.GET_ROUTEINFO_BY_TOPIC: _echo},
            tls_mode=TlsMode.ENFORCING,
            ssl_context=ctx,
        ).start("127.0.0.1", 0)
        permissive = await RemotingServer(
            {RequestCode.GET_ROUTEINFO_BY_TOPIC: _echo},
            tls_mode=TlsMode.PERMISSIVE,
            ssl_context=ctx,
        ).start("127.0.0.1", 0)
        plain = await RemotingServer({RequestCode.GET_ROUTEINFO_BY_TOPIC: _echo}).start()
        try:
            assert await _ask(enforcing.port, trust) == "true"
            with pytest.raises(ConnectionClosedError):
                await _ask(enforcing.port)  # plain bytes never make a TLS handshake
            # a client that trusts another certificate refuses the server
            with pytest.raises(ConnectionClosedError, match="CERTIFICATE_VERIFY_FAILED"):
                await _ask(enforcing.port, client_context(other_cert))
            assert await _ask(permissive.port, trust) == "true"
            assert await _ask(permissive.port) == "false"
            assert await _ask(plain.port) == "false"
            with pytest.raises(ConnectionClosedError):
                await _ask(plain.port, trust)
            # a pooled client reuses its TLS connection
            client = RemotingClient(ssl=trust)
            for _ in range(3):
                resp = await client.invoke(f"127.0.0.1:{permissive.port}", _request())
                assert resp.ext_fields["tls"] == "true"
            assert len(permissive.connections) == 1
            await client.close()
        finally:
            for server in (enforcing, permissive, plain):
                await server.stop()

    asyncio.run(main())


@async_test
async def test_permissive_drops_a_peer_that_never_sends_its_first_byte(cert) -> None:
    from broker.remoting.limits import ServerLimits

    server = await RemotingServer(
        {RequestCode.GET_ROUTEINFO_BY_TOPIC: _echo},
        ServerLimits(frame_read_timeout_ms=200),
        tls_mode=TlsMode.PERMISSIVE,
        ssl_context=server_context(*cert),
    ).start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        async with asyncio.timeout(5):
            assert await reader.read(1) == b""
        writer.close()
        assert server.guard.refusals.total == 1 and server._sniffing == 0
    finally:
        await server.stop()


def _namesrv(tmp_path, *flags: str) -> LocalProcess:
    port = free_port()
    args = ["namesrv", "--host", "127.0.0.1", "--listen-port", str(port), *flags]
    return LocalProcess.start("namesrv", args, port, tmp_path / "namesrv.log")


def _route_request() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"})


@pytest.mark.parametrize("mode", ["enforcing", "permissive"])
def test_name_server_process_over_tls(cert, tmp_path, mode) -> None:
    ns = _namesrv(tmp_path, "--tls-mode", mode, "--tls-cert", cert[0], "--tls-key", cert[1])
    trust = client_context(cert[0])

    async def main() -> None:
        conn = await connect(ns.addr, ssl=trust)
        resp = await conn.invoke(_route_request())
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        await conn.close()
        plain = await connect(ns.addr)
        if mode == "permissive":
            resp = await plain.invoke(_route_request())
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        else:
            with pytest.raises(ConnectionClosedError):
                await plain.invoke(_route_request())
        await plain.close()

    try:
        asyncio.run(main())
    finally:
        assert ns.stop() == 0


def test_name_server_refuses_tls_without_a_usable_certificate(tmp_path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "namesrv",
            "--host",
            "127.0.0.1",
            "--listen-port",
            str(free_port()),
            "--tls-mode",
            "enforcing",
            "--tls-cert",
            str(tmp_path / "missing.pem"),
            "--tls-key",
            str(tmp_path / "k.pem"),
        ],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "missing.pem" in lines[0]


def test_broker_conf_tls_keys(tmp_path, cert) -> None:
    base = {"storePathRootDir": str(tmp_path)}
    with pytest.raises(ConfigError, match="tlsMode.*tlsServerCertPath"):
        BrokerConfig.from_dict({**base, "tlsMode": "enforcing"})
    cfg = BrokerConfig.from_dict(
        {
            **base,
            "tlsMode": "permissive",
            "tlsServerCertPath": cert[0],
            "tlsServerKeyPath": cert[1],
            "tlsServerKeyPassword": "s3cret",
        }
    )
    assert cfg.tls_mode is TlsMode.PERMISSIVE and "s3cret" not in repr(cfg)
    with pytest.raises(ConfigError, match="tlsMode"):
        BrokerConfig.from_dict({**base, "tlsMode": "sometimes"})


@async_test
async def test_broker_node_serves_tls_and_plain_in_permissive_mode(tmp_path, cert) -> None:
    from broker.node import BrokerNode

    config = BrokerConfig.from_dict(
        {
            "storePathRootDir": str(tmp_path / "store"),
            "listenPort": 0,
            "mappedFileSizeCommitLog": 1 << 20,
            "tlsMode": "permissive",
            "tlsServerCertPath": cert[0],
            "tlsServerKeyPath": cert[1],
        }
    )

    node = await BrokerNode.start(config, "127.0.0.1")
    try:
        addr = f"127.0.0.1:{node.server.port}"
        info = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        for ssl in (client_context(cert[0]), None):
            conn = await connect(addr, ssl=ssl)
            resp = await conn.invoke(info)
            assert resp.code == ResponseCode.SUCCESS
            await conn.close()
    finally:
        await node.stop()


def test_broker_with_tls_enable_registers_with_an_enforcing_name_server(tmp_path, cert) -> None:
    from broker.node import BrokerNode

    ns = _namesrv(tmp_path, "--tls-mode", "enforcing", "--tls-cert", cert[0], "--tls-key", cert[1])
    config = BrokerConfig.from_dict(
        {
            "storePathRootDir": str(tmp_path / "store"),
            "listenPort": 0,
            "mappedFileSizeCommitLog": 1 << 20,
            "namesrvAddr": ns.addr,
            "brokerName": "tls-a",
            "tlsEnable": "true",
            "tlsClientTrustCertPath": cert[0],
        }
    )
    trust = client_context(cert[0])

    async def main() -> None:
        node = await BrokerNode.start(config, "127.0.0.1")
        try:
            conn = await connect(ns.addr, ssl=trust)
            resp = await conn.invoke(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            await conn.close()
            assert resp.code == ResponseCode.SUCCESS
            assert "tls-a" in resp.body.decode()
        finally:
            await node.stop()

    try:
        asyncio.run(main())
    finally:
        assert ns.stop() == 0


@async_test
async def test_enforcing_counts_handshakes_against_the_cap_and_refuses_plain_bytes(cert) -> None:
    from broker.remoting.limits import ServerLimits

    server = await RemotingServer(
        {RequestCode.GET_ROUTEINFO_BY_TOPIC: _echo},
        ServerLimits(max_connections=3, frame_read_timeout_ms=60_000),
        tls_mode=TlsMode.ENFORCING,
        ssl_context=server_context(*cert),
    ).start("127.0.0.1", 0)
    try:
        silent = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
        await wait_for(lambda: server._sniffing >= 3, 5000, what="three peers sniffed")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        async with asyncio.timeout(5):
            assert await reader.read(1) == b"", "a fourth peer is refused at once"
        writer.close()
        for _, w in silent:
            w.close()
        await wait_for(lambda: not server._sniffing, 5000, what="the sniffers released")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"\x00\x00\x00\x10plain")
        try:  # closed with our bytes unread: a reset, or an end of stream
            async with asyncio.timeout(5):
                assert await reader.read(1) == b"", "plain bytes are dropped"
        except ConnectionResetError:
            pass
        writer.close()
        assert await _ask(server.port, client_context(cert[0])) == "true"
    finally:
        await server.stop()


def _encrypted_key(directory, pass_phrase: bytes) -> tuple[str, str]:
    cert_path, key_path = _make_cert(directory)
    key = serialization.load_pem_private_key(open(key_path, "rb").read(), None)
    with open(key_path, "wb") as fh:
        fh.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(pass_phrase),
            )
        )
    return cert_path, key_path


def test_an_encrypted_key_takes_its_pass_phrase_from_a_file_or_variable_never_a_prompt(
    tmp_path, monkeypatch
):
    from broker.remoting.tls import KEY_PASSWORD_ENV, key_password

    cert, key = _encrypted_key(tmp_path, b"s3cret-phrase")
    monkeypatch.delenv(KEY_PASSWORD_ENV, raising=False)
    with pytest.raises(ConfigError, match="the key is encrypted"):
        server_context(cert, key, key_password(None, None))
    phrase_file = tmp_path / "phrase"
    phrase_file.write_text("s3cret-phrase\n")
    assert server_context(cert, key, key_password(None, str(phrase_file)))
    monkeypatch.setenv(KEY_PASSWORD_ENV, "s3cret-phrase")
    assert server_context(cert, key, key_password(None, None))
    with pytest.raises(ConfigError, match="pass phrase file"):
        key_password(None, str(tmp_path / "missing"))
    # a real name server process with no terminal: one line, exit 2, no prompt
    monkeypatch.delenv(KEY_PASSWORD_ENV)
    port = free_port()
    args = f"namesrv --listen-port {port} --tls-mode enforcing --tls-cert {cert} --tls-key {key}"
    r = subprocess.run(
        [sys.executable, "-m", "broker.cli", *args.split()],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2 and "the key is encrypted" in r.stderr, r.stderr
    args += f" --tls-key-password-file {phrase_file}"
    proc = LocalProcess.start("namesrv", args.split(), port, tmp_path / "ns.log")
    proc.stop()
