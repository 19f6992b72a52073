"""ACL on the name server, over TCP: only a signed request is answered, only an admin account
registers a broker (an anonymous REGISTER_BROKER can no longer repoint a topic's route), and a
broker with its own admin keys registers and is found."""

from __future__ import annotations

import json

from broker.acl.accounts import PlainAcl
from broker.acl.permission import AclChecker
from broker.acl.signing import AclSigner
from broker.namesrv import NameServer
from broker.node import BrokerNode
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.acl.acl_files import PLAIN_ACL, acl_broker_conf, admin, user
from tests.acl.helpers import config
from tests.support.aio import async_test


def _register(addr: str, topic: str = "OrderTopic") -> RemotingCommand:
    body = {
        "topicConfigSerializeWrapper": {
            "topicConfigTable": {topic: {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}},
            "dataVersion": {"counter": 1, "timestamp": 0},
        },
        "filterServerList": [],
    }
    return RemotingCommand.request(
        RequestCode.REGISTER_BROKER,
        {
            "brokerName": "evil",
            "brokerAddr": addr,
            "clusterName": "DefaultCluster",
            "haServerAddr": addr,
            "brokerId": 0,
            "compressed": False,
        },
        json.dumps(body).encode(),
    )


def _route(topic: str = "OrderTopic") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


@async_test
async def test_namesrv_answers_only_signed_requests_and_registers_only_admins(tmp_path):
    ns = NameServer(acl=AclChecker(PlainAcl.from_text(PLAIN_ACL)))
    await ns.server.start("127.0.0.1", 0)
    addr = f"127.0.0.1:{ns.server.port}"
    client = RemotingClient()
    try:
        conn = await client.connection(addr)
        for signer in (None, user(), AclSigner("haproofAdmin", "bad-secret")):
            req = _register("6.6.6.6:10911")
            if signer is not None:
                signer(req)
            resp = await conn.invoke(req, 5000)
            assert resp.code == ResponseCode.NO_PERMISSION, resp.remark
        assert ns.routes.topic_route("OrderTopic") is None
        assert ns.routes.cluster_info()["brokerAddrTable"] == {}
        unsigned = await conn.invoke(_route(), 5000)
        assert unsigned.code == ResponseCode.NO_PERMISSION
        req = _register("127.0.0.1:10911")
        admin()(req)
        assert (await conn.invoke(req, 5000)).code == ResponseCode.SUCCESS
        req = _route()
        user()(req)
        resp = await conn.invoke(req, 5000)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert "127.0.0.1:10911" in resp.body.decode()
    finally:
        await client.close()
        await ns.server.stop()


@async_test
async def test_every_namesrv_request_unsigned_or_wrongly_signed_is_refused(tmp_path):
    ns = NameServer(acl=AclChecker(PlainAcl.from_text(PLAIN_ACL)))
    await ns.server.start("127.0.0.1", 0)
    addr = f"127.0.0.1:{ns.server.port}"
    client = RemotingClient()
    try:
        req = _register("127.0.0.1:10911")
        admin()(req)
        assert (await client.invoke(addr, req, 5000)).code == ResponseCode.SUCCESS
        before = json.dumps(ns.routes.cluster_info(), sort_keys=True)
        conn = await client.connection(addr)
        codes = sorted(ns.server.processors)
        assert len(codes) >= 6
        for signer in (None, AclSigner("appUser01", "not-the-secret")):
            for code in codes:
                req = (
                    _register("6.6.6.6:1")
                    if code == RequestCode.REGISTER_BROKER
                    else (
                        RemotingCommand.request(
                            code,
                            {
                                "topic": "OrderTopic",
                                "brokerName": "evil",
                                "brokerAddr": "127.0.0.1:10911",
                                "clusterName": "DefaultCluster",
                                "brokerId": 0,
                            },
                        )
                    )
                )
                if signer is not None:
                    signer(req)
                resp = await conn.invoke(req, 5000)
                assert resp.code == ResponseCode.NO_PERMISSION, (code, resp.remark)
        assert json.dumps(ns.routes.cluster_info(), sort_keys=True) == before
    finally:
        await client.close()
        await ns.server.stop()


@async_test
async def test_broker_with_acl_registers_with_its_own_keys(tmp_path):
    ns = NameServer(acl=AclChecker(PlainAcl.from_text(PLAIN_ACL)))
    await ns.server.start("127.0.0.1", 0)
    ns_addr = f"127.0.0.1:{ns.server.port}"
    cfg = config(tmp_path, namesrvAddr=ns_addr, **acl_broker_conf(tmp_path))
    node = await BrokerNode.start(cfg, "127.0.0.1")
    try:
        assert node.config.broker_addr in ns.routes.live_table
        assert ns.routes.topic_route("TBW102") is not None
    finally:
        await node.stop()
        await ns.server.stop()


@async_test
async def test_broker_without_keys_is_refused_by_an_acl_namesrv(tmp_path):
    ns = NameServer(acl=AclChecker(PlainAcl.from_text(PLAIN_ACL)))
    await ns.server.start("127.0.0.1", 0)
    cfg = config(tmp_path, namesrvAddr=f"127.0.0.1:{ns.server.port}")
    node = await BrokerNode.start(cfg, "127.0.0.1")
    try:
        assert await node.register_all() == 0
        assert ns.routes.live_table == {}
    finally:
        await node.stop()
        await ns.server.stop()


@async_test
async def test_registration_with_bad_names_or_numbers_touches_no_route(tmp_path):
    def reg(**over):
        req = _register("127.0.0.1:10911", topic=over.pop("topic", "OrderTopic"))
        if "queues" in over:
            doc = json.loads(req.body)
            table = doc["topicConfigSerializeWrapper"]["topicConfigTable"]
            next(iter(table.values()))["readQueueNums"] = over.pop("queues")
            req.body = json.dumps(doc).encode()
        req.ext_fields.update({k: str(v) for k, v in over.items()})
        return req

    ns = NameServer()  # no ACL: anyone may register, but only sane names and numbers
    await ns.server.start("127.0.0.1", 0)
    client = RemotingClient()
    addr = f"127.0.0.1:{ns.server.port}"
    try:
        for bad in (
            reg(topic="../../x"),
            reg(topic="t" * 200),
            reg(brokerName="evil\nname"),
            reg(clusterName=""),
            reg(brokerAddr="no-port"),
            reg(brokerId=-1),
            reg(queues=10**12),
            reg(queues="many"),
        ):
            resp = await client.invoke(addr, bad, 5000)
            assert resp.code == ResponseCode.SYSTEM_ERROR, (bad.ext_fields, resp.remark)
        assert ns.routes.broker_addr_table == {} and ns.routes.topic_queue_table == {}
        assert (await client.invoke(addr, reg(), 5000)).code == ResponseCode.SUCCESS
        assert ns.routes.topic_route("OrderTopic") is not None
    finally:
        await client.close()
        await ns.server.stop()
