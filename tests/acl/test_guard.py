"""The dispatch guard itself: a refused request never reaches its handler, an allowed one does,
and an eager handler (the send path) stays eager."""

from __future__ import annotations

from broker.acl.accounts import PlainAcl
from broker.acl.permission import AclChecker
from broker.processors.guard import guarded, peer_host
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.connection import Eager
from tests.acl.acl_files import PLAIN_ACL, TOPIC, user
from tests.acl.helpers import send_v2
from tests.support.aio import async_test


class _Conn:
    peer = "10.1.2.3:4567"


@async_test
async def test_refused_requests_never_reach_the_handler_and_eager_stays_eager():
    calls = []

    async def handler(conn, req):
        calls.append(req.code)
        return req.make_response(ResponseCode.SUCCESS)

    table = guarded(
        {RequestCode.SEND_MESSAGE_V2: Eager(handler), RequestCode.PULL_MESSAGE: handler},
        AclChecker(PlainAcl.from_text(PLAIN_ACL)),
    )
    assert type(table[RequestCode.SEND_MESSAGE_V2]) is Eager
    assert type(table[RequestCode.PULL_MESSAGE]) is not Eager

    unsigned = await table[RequestCode.SEND_MESSAGE_V2](_Conn(), send_v2(TOPIC))
    assert unsigned.code == ResponseCode.NO_PERMISSION and calls == []
    bad_name = send_v2("../x")
    user()(bad_name)  # signed, but the name is refused (no PUB on it either: ACL first)
    assert (await table[RequestCode.SEND_MESSAGE_V2](_Conn(), bad_name)).code == 16
    good = send_v2(TOPIC)
    user()(good)
    ok = await table[RequestCode.SEND_MESSAGE_V2](_Conn(), good)
    assert ok.code == ResponseCode.SUCCESS and calls == [RequestCode.SEND_MESSAGE_V2]


@async_test
async def test_without_acl_only_names_are_checked():
    async def handler(conn, req):
        return req.make_response(ResponseCode.SUCCESS)

    table = guarded({RequestCode.SEND_MESSAGE_V2: handler})

    assert (await table[310](_Conn(), send_v2(TOPIC))).code == ResponseCode.SUCCESS
    assert (await table[310](_Conn(), send_v2("a b"))).code == ResponseCode.SYSTEM_ERROR


def test_peer_host():
    assert peer_host("10.0.0.1:5555") == "10.0.0.1"
    assert peer_host("::1:5555") == "::1"
