"""mqadmin's updateSubGroup and deleteSubGroup against a real name server and broker process
(UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200, DELETE_SUBSCRIPTIONGROUP 207), as tables and as
``--json`` valid against docs/schemas/admin.schema.json; and the guard and the handler reading
the same group from 200's body."""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.acl.permission import request_resources
from broker.admin.common import invoke_all
from broker.processors.group_body import group_body
from broker.processors.names import name_refusal
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.support.running import admin, admin_json, running_group


def groups_of(addr: str) -> dict:
    req = lambda: RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)  # noqa: E731
    [(_addr, resp)] = asyncio.run(invoke_all([addr], req))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return json.loads(resp.body)["subscriptionGroupTable"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_group(tmp_path_factory.mktemp("subgroup")) as g:
        yield g.ns, g.m


def test_update_and_delete_sub_group(cluster):
    ns, m = cluster
    res = admin("updateSubGroup", "-n", ns.addr, "-c", "C", "-g", "G1", "-r", "3", "-s", "false")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"create subscription group to {m.addr} success."
    assert lines[1].startswith('SubscriptionGroupConfig [groupName="G1", consumeEnable=false')
    g1 = groups_of(m.addr)["G1"]
    assert (g1["retryMaxTimes"], g1["consumeEnable"], g1["consumeBroadcastEnable"]) == (
        3,
        False,
        False,
    )

    rows = admin_json("updateSubGroup", "-b", m.addr, "-g", "G2", "-q", "2", "-o", "true")
    assert rows == [
        {"brokerAddr": m.addr, "subscriptionGroupConfig": rows[0]["subscriptionGroupConfig"]}
    ]
    g2 = groups_of(m.addr)["G2"]
    assert (g2["retryQueueNums"], g2["consumeMessageOrderly"], g2["retryMaxTimes"]) == (2, True, 16)

    res = admin("deleteSubGroup", "-b", m.addr, "-g", "G1")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"delete subscription group [G1] from broker [{m.addr}] success.\n"
    assert "G1" not in groups_of(m.addr)
    doc = admin_json("deleteSubGroup", "-n", ns.addr, "-c", "C", "-g", "G2")
    assert doc["brokers"] == [{"brokerAddr": m.addr}]
    assert [t["topic"] for t in doc["topics"]] == ["%RETRY%G2", "%DLQ%G2"]
    assert "G2" not in groups_of(m.addr)
    # deleting what is gone is a success, as in RocketMQ
    assert admin("deleteSubGroup", "-b", m.addr, "-g", "G2").returncode == 0


def test_refusals(cluster):
    ns, m = cluster
    res = admin("updateSubGroup", "-b", m.addr, "-g", "bad/group")
    assert res.returncode == 1 and "illegal characters" in res.stderr
    res = admin("updateSubGroup", "-b", m.addr, "-g", "G", "-s", "maybe")
    assert res.returncode == 2
    # a body that is not a SubscriptionGroupConfig
    req = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
    req.body = b'{"groupName": 5}'
    [(_a, resp)] = asyncio.run(invoke_all([m.addr], lambda: req))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    # cleanOffset is refused: offsets stay
    fields = {"groupName": "G", "cleanOffset": "true"}
    req2 = RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, fields)
    [(_a, resp)] = asyncio.run(invoke_all([m.addr], lambda: req2))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "cleanOffset" in resp.remark


def test_guard_reads_the_group_the_handler_writes():
    req = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
    req.body = json.dumps({"groupName": "GX", "retryMaxTimes": 2, "extra": 1}).encode()
    [res] = request_resources(req)
    assert (res.kind, res.name, res.source) == ("group", "GX", "body")
    assert group_body(req) == {"groupName": "GX", "retryMaxTimes": 2}
    req.body = json.dumps({"groupName": "../x"}).encode()
    refused = name_refusal(req)
    assert refused is not None and "(field body)" in refused[1]
    for bad in (b"", b"[]", b'{"groupName": "G", "retryMaxTimes": "3"}', b'{"consumeEnable": 1}'):
        req.body = bad
        assert group_body(req) is None and request_resources(req) == []
    delete = RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G/"})
    assert name_refusal(delete) is not None
