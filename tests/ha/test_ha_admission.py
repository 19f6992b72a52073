"""The HA port serves and believes only its slaves (issue #17): an address allow-list, a signed
handshake with ACL, and no ack beyond what a connection was sent. Real sockets on 127.0.0.x
(Linux routes all of 127/8 to lo, so 127.0.0.2 is "another host")."""

from __future__ import annotations

import asyncio
import logging

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.acl.signing import AclSigner
from broker.ha import wire
from broker.ha.admission import handshake_frame
from broker.node import BrokerNode
from broker.store.results import PutMessageStatus
from tests.acl.acl_files import acl_broker_conf, admin, user
from tests.ha.test_replication import _config, log_bytes, put, start_pair, stop, wait_for
from tests.support.aio import async_test

READ_TIMEOUT_S = 10


async def _everything_until_closed(reader) -> bytes:
    """What the master sent before closing (a close with our bytes unread is a reset)."""
    got = bytearray()
    try:
        async with asyncio.timeout(READ_TIMEOUT_S):
            while chunk := await reader.read(65536):
                got += chunk
    except ConnectionResetError:
        pass
    return bytes(got)


async def _fake_slave(port: int, first: bytes, local_host: str = "127.0.0.1"):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(local_host, 0))
    writer.write(first)
    await writer.drain()
    return reader, writer


async def _fill(master, n: int) -> int:
    for i in range(n):
        await put(master, i)
    return master.store.max_phy_offset


def test_peer_outside_the_allow_list_gets_nothing_and_is_logged_once(tmp_path, caplog):
    async def main():
        master = await BrokerNode.start(
            _config(
                tmp_path,
                "m",
                brokerRole="SYNC_MASTER",
                haAllowedSlaves="127.0.0.2",
                syncFlushTimeout=500,
            ),
            "127.0.0.1",
        )
        try:
            await _fill(master, 5)
            for _ in range(5):  # an anonymous peer asking for everything, retrying
                reader, writer = await _fake_slave(master.replication.ha.port, wire.build_report(0))
                assert await _everything_until_closed(reader) == b""
                writer.close()
            assert (
                master.replication.ha.connections == []
                and master.replication.ha.admission.refused == 5
            )
            _, status = await put(master, 99)
            assert status is PutMessageStatus.SLAVE_NOT_AVAILABLE
            # the allowed address is served: frames from the start of the log
            reader, writer = await _fake_slave(
                master.replication.ha.port, wire.build_report(0), "127.0.0.2"
            )
            async with asyncio.timeout(READ_TIMEOUT_S):
                offset, size = wire.read_header(await reader.readexactly(12))
            assert offset == 0 and size > 0
            writer.close()
        finally:
            await stop(master)

    with caplog.at_level(logging.WARNING, logger="broker.ha.admission"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "HA: refused" in r.getMessage()]
    assert len(lines) == 1 and "127.0.0.1:" in lines[0], lines


async def _challenged(port: int):
    """Connect as a slave would with ACL: the master speaks first, with this connection's nonce."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    async with asyncio.timeout(READ_TIMEOUT_S):
        nonce = wire.read_challenge(await reader.readexactly(wire.CHALLENGE_SIZE))
    return reader, writer, nonce


@async_test
async def test_with_acl_only_a_signed_admin_handshake_gets_in(tmp_path):
    master = await BrokerNode.start(
        _config(
            tmp_path,
            "m",
            brokerRole="SYNC_MASTER",
            syncFlushTimeout=500,
            **acl_broker_conf(tmp_path),
        ),
        "127.0.0.1",
    )
    port = master.replication.ha.port
    try:
        end = await _fill(master, 5)
        report = wire.build_report(0)
        stale = AclSigner("haproofAdmin", "adminSecret-123", clock_ms=lambda: 1_000_000)
        # the one a slave sent on an earlier connection: a different nonce
        reader, writer, earlier_nonce = await _challenged(port)
        captured = handshake_frame(admin(), "slave-1", earlier_nonce)
        writer.close()
        firsts = (
            lambda nonce: report,  # anonymous, classic
            lambda nonce: wire.build_report(end),  # anonymous, claiming everything
            lambda nonce: handshake_frame(user(), "app", nonce) + report,  # not an admin
            lambda nonce: (
                handshake_frame(AclSigner("haproofAdmin", "guessed"), "x", nonce) + report
            ),
            lambda nonce: handshake_frame(stale, "old", nonce) + report,  # out of the window
            lambda nonce: captured + report,  # replayed on another connection
            lambda nonce: b"HAAC\xff\xff" + report,  # oversized
        )
        for first in firsts:
            reader, writer, nonce = await _challenged(port)
            writer.write(first(nonce))
            await writer.drain()
            assert await _everything_until_closed(reader) == b""
            writer.close()
        assert master.replication.ha.connections == []
        _, status = await put(master, 99)
        assert status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        reader, writer, nonce = await _challenged(port)
        writer.write(handshake_frame(admin(), "slave-1", nonce) + report)
        async with asyncio.timeout(READ_TIMEOUT_S):
            offset, size = wire.read_header(await reader.readexactly(12))
        assert offset == 0 and size > 0
        await wait_for(lambda: master.replication.ha.peer_names, what="named slave")
        assert list(master.replication.ha.peer_names.values()) == ["slave-1"]
        writer.close()
    finally:
        await stop(master)


@async_test
async def test_an_ack_beyond_what_was_sent_closes_the_connection_and_confirms_nothing(tmp_path):
    master = await BrokerNode.start(
        _config(tmp_path, "m", brokerRole="SYNC_MASTER", syncFlushTimeout=500), "127.0.0.1"
    )
    try:
        end = await _fill(master, 5)  # stored, SLAVE_NOT_AVAILABLE: no slave yet
        # "I have nothing" and, in the same packet, "I have it all": nothing was sent yet
        reader, writer = await _fake_slave(
            master.replication.ha.port, wire.build_report(0) + wire.build_report(end)
        )
        await _everything_until_closed(reader)
        writer.close()
        assert master.replication.ha.push2slave_max == 0, "the lie was counted as a confirmation"
        await wait_for(lambda: not master.replication.ha.connections, what="connection dropped")
        _, status = await put(master, 99)
        assert status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    finally:
        await stop(master)


@async_test
async def test_slaves_with_acl_replicate_byte_identically_and_sync_sends_succeed(tmp_path):
    master, slave = await start_pair(
        tmp_path, role="SYNC_MASTER", syncFlushTimeout=5000, **acl_broker_conf(tmp_path)
    )
    try:
        await wait_for(lambda: master.replication.ha.status()["slaves"], what="slave connected")
        statuses = [(await put(master, i))[1] for i in range(20)]
        assert set(statuses) == {PutMessageStatus.PUT_OK}
        end = master.store.max_phy_offset
        await wait_for(lambda: slave.store.max_phy_offset == end, what="catch-up")
        assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
        assert master.replication.ha.admission.refused == 0
    finally:
        await stop(slave, master)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_handshake_bytes_are_fields_or_a_protocol_error(data):
    try:
        size = wire.read_handshake_head(data[:6].ljust(6, b"\0"))
        fields = wire.read_handshake_payload(data[6 : 6 + size])
    except wire.HAProtocolError:
        return
    assert isinstance(fields, dict)
