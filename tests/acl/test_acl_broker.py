"""ACL on a broker, over TCP: with aclEnable, an unsigned or wrongly signed request of every kind
gets NO_PERMISSION and changes nothing on disk or in any table; a signed one is held to its
account's permissions."""

from __future__ import annotations

import pytest

from broker.acl.signing import AclSigner
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.acl.acl_files import (
    ADMIN_AK,
    GROUP,
    TOPIC,
    USER_AK,
    acl_broker_conf,
    admin,
    user,
)
from tests.acl.helpers import fingerprint, pull, requests_naming, run_node, send_v2, tables

BAD_SIGNERS = {
    "unsigned": None,
    "wrong secret": AclSigner(USER_AK, "not-the-secret"),
    "admin key, wrong secret": AclSigner(ADMIN_AK, "not-the-secret"),
    "unknown account": AclSigner("nobody-at-all", "whatever-secret"),
}


def _every_request(codes) -> list[RemotingCommand]:
    """A request for every code the broker serves: the named ones with their fields, the
    others with none (the check comes before any field is read)."""
    named = {r.code: r for r in requests_naming(TOPIC, GROUP)}
    return [named.get(code) or RemotingCommand.request(code, {}) for code in sorted(codes)]


def _copy(req: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.request(req.code, dict(req.ext_fields), req.body)


@pytest.mark.parametrize("how", sorted(BAD_SIGNERS))
def test_unsigned_or_wrongly_signed_requests_of_every_kind_are_refused(tmp_path, how):
    signer = BAD_SIGNERS[how]

    async def body(node, client, addr):
        # the topic exists, so a request that got through would really do something
        created = await client.invoke(addr, _create(TOPIC), 5000)
        assert created.code == ResponseCode.SUCCESS, created.remark
        disk, state = fingerprint(tmp_path), tables(node)
        role, epoch = node.store.role, node.role.epoch
        codes = set(node.server.processors)
        assert len(codes) >= 25, sorted(codes)  # every handler, not a few
        for req in _every_request(codes):
            req = _copy(req)
            if signer is not None:
                signer(req)
            resp = await node_client_invoke(client, addr, req)
            assert resp.code == ResponseCode.NO_PERMISSION, (how, req.code, resp.remark)
            assert resp.remark.startswith("ACL: ")
        assert fingerprint(tmp_path) == disk
        assert tables(node) == state
        assert (node.store.role, node.role.epoch) == (role, epoch)

    run_node(tmp_path, body, rpc_hook=None, **acl_broker_conf(tmp_path))


async def node_client_invoke(client, addr, req):
    conn = await client.connection(addr)  # bypasses the client's own hook: sent as built
    return await conn.invoke(req, 5000)


def _create(topic: str) -> RemotingCommand:
    req = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
    )
    admin()(req)
    return req


def test_signed_requests_are_held_to_the_accounts_permissions(tmp_path):
    async def body(node, client, addr):
        async def call(req, signer):
            signer(req)
            return await node_client_invoke(client, addr, req)

        assert (await call(_create_unsigned("ReadOnlyTopic"), admin())).code == 0
        assert (await call(_create_unsigned(TOPIC), admin())).code == 0
        assert (await call(_create_unsigned("OtherTopic"), admin())).code == 0
        # the application account: PUB|SUB on its topic, SUB on its group, nothing else
        ok = await call(send_v2(TOPIC), user())
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        for req, why in [
            (send_v2("OtherTopic"), "no PUB on topic 'OtherTopic'"),
            (send_v2("ReadOnlyTopic"), "no PUB on topic 'ReadOnlyTopic'"),
            (pull(TOPIC, "OtherGroup"), "no SUB on group 'OtherGroup'"),
            (pull("OtherTopic", GROUP), "no SUB on topic 'OtherTopic'"),
            (_create_unsigned("NewTopic"), "needs an admin account"),
        ]:
            resp = await call(req, user())
            assert resp.code == ResponseCode.NO_PERMISSION, (req.code, resp.remark)
            assert why in resp.remark, resp.remark
        got = await call(pull(TOPIC, GROUP), user())
        assert got.code == ResponseCode.SUCCESS, got.remark
        # a field changed after signing: the signature no longer matches
        tampered = send_v2(TOPIC)
        user()(tampered)
        tampered.ext_fields["e"] = "1"
        resp = await node_client_invoke(client, addr, tampered)
        assert resp.code == ResponseCode.NO_PERMISSION and "signature" in resp.remark
        # so is the body
        tampered = send_v2(TOPIC, b"one")
        user()(tampered)
        tampered.body = b"two"
        resp = await node_client_invoke(client, addr, tampered)
        assert resp.code == ResponseCode.NO_PERMISSION and "signature" in resp.remark
        assert node.store.get_max_offset_in_queue(TOPIC, 0) == 1
        assert node.store.get_max_offset_in_queue(TOPIC, 1) == 0

    run_node(tmp_path, body, **acl_broker_conf(tmp_path))


def _create_unsigned(topic: str) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
    )


def test_acl_off_ignores_signatures(tmp_path):
    async def body(node, client, addr):
        resp = await client.invoke(addr, send_v2("AnyTopic"), 5000)
        assert resp.code == ResponseCode.SUCCESS, resp.remark

    run_node(tmp_path, body, rpc_hook=AclSigner("someone1", "wrong-secret"))
