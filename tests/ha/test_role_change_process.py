"""Issue 28's finding 3 against a real ``haproof broker`` master on 127.0.0.1: a captured HA
handshake, a RocketMQ-scheme signature or a replayed signed request never changes the master's
role, and a NOTIFY_BROKER_ROLE_CHANGED (1008) that cannot be carried out is refused before
anything changes (the master stays master and keeps taking sends)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from broker.acl.signing import AclSigner
from broker.ha import wire
from broker.ha.admission import handshake_frame
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.acl.acl_files import ADMIN_AK, ADMIN_SK, acl_broker_conf, admin
from tests.acl.helpers import send_v2
from tools.localcluster import LocalProcess, free_port, start_broker, write_broker_conf


def _master(tmp_path: Path, **props) -> tuple[LocalProcess, int]:
    port, ha_port = free_port(), free_port()
    conf = write_broker_conf(
        tmp_path / "m.conf",
        {
            "brokerClusterName": "C",
            "brokerName": "broker-a",
            "brokerRole": "ASYNC_MASTER",
            "storePathRootDir": tmp_path / "store",
            "listenPort": port,
            "haListenPort": ha_port,
            "mappedFileSizeCommitLog": 1 << 20,
            **props,
        },
    )
    return start_broker("m", conf, port, tmp_path), ha_port


async def _raw(addr: str, req: RemotingCommand) -> RemotingCommand:
    """Sent exactly as built (no signing hook)."""
    client = RemotingClient()
    try:
        conn = await client.connection(addr)
        return await conn.invoke(req, 10_000)
    finally:
        await client.close()


def _copy(req: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.request(req.code, dict(req.ext_fields), req.body)


async def _still_master(addr: str, signer) -> None:
    req = RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE)
    if signer is not None:
        signer(req)
    doc = json.loads((await _raw(addr, req)).body)
    assert doc["brokerRole"] == "ASYNC_MASTER" and doc["epoch"] == 1, doc
    send = send_v2("AfterAttack")
    if signer is not None:
        signer(send)
    resp = await _raw(addr, send)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def _role_change(master_addr: str, epoch: int = 2) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
        {"masterAddress": master_addr, "masterEpoch": epoch, "brokerId": 1},
    )


async def _captured_handshake_fields(ha_port: int) -> dict[str, str]:
    """What a slave sent on its HA connection (signed by the brokers' admin key)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", ha_port)
    try:
        nonce = wire.read_challenge(await reader.readexactly(wire.CHALLENGE_SIZE))
        frame = handshake_frame(admin(), "slave-1", nonce)
    finally:
        writer.close()
    return wire.read_handshake_payload(frame[wire.HANDSHAKE_HEAD.size :])


def test_captured_signatures_never_change_the_masters_role(tmp_path):
    proc, ha_port = _master(tmp_path, **acl_broker_conf(tmp_path))
    addr = proc.addr
    try:

        async def main():
            # the HA handshake's signature, reused for a role change
            shake = await _captured_handshake_fields(ha_port)
            forged = _role_change("nohost:1")
            forged.ext_fields.update({k: v for k, v in shake.items() if k != "NodeName"})
            resp = await _raw(addr, forged)
            assert resp.code == ResponseCode.NO_PERMISSION, resp.remark
            # RocketMQ's scheme (values only, no time, replayable) never authorises 1008
            legacy = _role_change("nohost:1")
            AclSigner(ADMIN_AK, ADMIN_SK, legacy=True)(legacy)
            resp = await _raw(addr, legacy)
            assert resp.code == ResponseCode.NO_PERMISSION and "scheme 2" in resp.remark
            # a request signed with scheme 2 is good once: its replay is refused
            create = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": "Replayed", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
            )
            admin()(create)
            assert (await _raw(addr, _copy(create))).code == ResponseCode.SUCCESS
            again = await _raw(addr, _copy(create))
            assert again.code == ResponseCode.NO_PERMISSION and "used already" in again.remark
            # a signed 1008 that cannot be carried out changes nothing either
            for target in ("nohost", f"127.0.0.1:{free_port()}"):
                bad = _role_change(target)
                admin()(bad)
                resp = await _raw(addr, bad)
                assert resp.code == ResponseCode.SYSTEM_ERROR, (target, resp.remark)
            await _still_master(addr, admin())

        asyncio.run(main())
    finally:
        proc.stop()


def test_without_acl_an_unusable_role_change_is_refused_before_anything_changes(tmp_path):
    proc, _ = _master(tmp_path)
    try:

        async def main():
            for fields in (
                {"masterAddress": "nohost", "masterEpoch": "2"},
                {"masterAddress": f"127.0.0.1:{free_port()}", "masterEpoch": "2"},
                {"masterAddress": "127.0.0.1:1", "masterEpoch": "x"},
                {"masterAddress": "127.0.0.1:1", "masterEpoch": "2", "brokerId": "0"},
                {"masterAddress": proc.addr, "masterEpoch": "2", "brokerRole": "SLAVE"},
                {"masterAddress": proc.addr, "masterEpoch": "0"},
            ):
                req = RemotingCommand.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, fields)
                resp = await _raw(proc.addr, req)
                assert resp.code == ResponseCode.SYSTEM_ERROR, (fields, resp.remark)
                await _still_master(proc.addr, None)

        asyncio.run(main())
    finally:
        proc.stop()
