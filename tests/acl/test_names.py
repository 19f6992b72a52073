"""Topic and group names as RocketMQ validates them, checked before anything touches the disk or
a table: the probes of issue #17 over TCP against an in-process broker, and properties over
arbitrary names."""

from __future__ import annotations

import os
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.processors.names import (
    GROUP_MAX_LENGTH,
    group_problem,
    is_reserved_for_send,
    name_refusal,
    topic_problem,
)
from broker.remoting.codes import ResponseCode
from tests.acl.helpers import fingerprint, requests_naming, run_node, send_v2, tables

_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")

PROBES = [
    "../../x",
    "/tmp/haproof-abs-probe",
    "t" * 200,
    "bad\nname",
    "",
    " ",
    "a/b",
    "..",
    "x.y",
    "é",
    "nul\x00",
]


def test_probes_get_an_error_and_write_nothing(tmp_path):
    async def body(node, client, addr):
        before_disk, before_tables = fingerprint(tmp_path), tables(node)
        for name in PROBES:
            for req in requests_naming(name, "CG"):
                resp = await client.invoke(addr, req, 5000)
                assert resp.code == ResponseCode.SYSTEM_ERROR, (name, req.code, resp.remark)
                assert "topic" in resp.remark, resp.remark
            for req in requests_naming("GoodTopic", name):
                if req.code in (10, 310, 17, 30):  # no group in these
                    continue
                resp = await client.invoke(addr, req, 5000)
                assert resp.code == ResponseCode.SYSTEM_ERROR, (name, req.code, resp.remark)
                assert "group" in resp.remark, resp.remark
        assert fingerprint(tmp_path) == before_disk
        assert tables(node) == before_tables
        assert not os.path.exists("/tmp/haproof-abs-probe")
        assert not (tmp_path.parent / "x").exists()
        # a good name still works, over the same connection
        resp = await client.invoke(addr, send_v2("GoodTopic"), 5000)
        assert resp.code == ResponseCode.SUCCESS, resp.remark

    # no periodic offset persist during the test: every file write would be a change
    run_node(tmp_path, body, flushConsumerOffsetInterval=3_600_000)


def test_clients_may_not_send_to_system_topics(tmp_path):
    async def body(node, client, addr):
        before = fingerprint(tmp_path / "store" / "commitlog")
        for topic in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_x"):
            resp = await client.invoke(addr, send_v2(topic), 5000)
            assert resp.code == ResponseCode.NO_PERMISSION, (topic, resp.remark)
            assert "forbidden" in resp.remark
        assert fingerprint(tmp_path / "store" / "commitlog") == before
        assert node.store.max_phy_offset == 0

    run_node(tmp_path, body)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=140) | st.from_regex(_TOPIC, fullmatch=True))
def test_a_topic_is_valid_exactly_when_rocketmq_says_so(name):
    valid = topic_problem(name) is None
    assert valid == bool(_TOPIC.fullmatch(name))
    if valid:
        root = "/store/consumequeue"
        assert os.path.dirname(os.path.normpath(os.path.join(root, name))) == root
        assert os.sep not in name and name not in (".", "..")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=140) | st.from_regex(_TOPIC, fullmatch=True))
def test_a_group_is_valid_when_its_retry_topic_is(name):
    valid = group_problem(name) is None
    assert valid == bool(_TOPIC.fullmatch(name) and len(name) <= GROUP_MAX_LENGTH)
    if valid:
        assert topic_problem("%RETRY%" + name) is None
        assert topic_problem("%DLQ%" + name) is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=140) | st.from_regex(_TOPIC, fullmatch=True))
def test_every_request_with_a_bad_name_is_refused_before_its_handler(name):
    bad_topic = topic_problem(name) is not None
    for req in requests_naming(name, "CG"):
        refusal = name_refusal(req)
        if bad_topic:
            assert refusal is not None and refusal[0] == ResponseCode.SYSTEM_ERROR
        elif req.code in (10, 310) and is_reserved_for_send(name):
            assert refusal is not None and refusal[0] == ResponseCode.NO_PERMISSION
        else:
            assert refusal is None, (req.code, refusal)


def test_offset_commits_name_a_real_queue_and_a_sane_offset(tmp_path):
    from broker.remoting.codes import RequestCode
    from broker.remoting.command import RemotingCommand

    def commit(topic, qid, offset):
        return RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "G", "topic": topic, "queueId": qid, "commitOffset": offset},
        )

    async def body(node, client, addr):
        assert (await client.invoke(addr, send_v2("T1"), 5000)).code == ResponseCode.SUCCESS
        for req, code in [
            (commit("NoSuchTopic", -1, 1), ResponseCode.SYSTEM_ERROR),
            (commit("T1", 999, 1), ResponseCode.SYSTEM_ERROR),
            (commit("T1", -1, 1), ResponseCode.SYSTEM_ERROR),
            (commit("T1", 2**40, 1), ResponseCode.SYSTEM_ERROR),
            (commit("T1", 0, -5), ResponseCode.SYSTEM_ERROR),
        ]:
            resp = await client.invoke(addr, req, 5000)
            assert resp.code == code, (req.ext_fields, resp.remark)
        assert node.store.consumer_offsets.table == {}
        ok = await client.invoke(addr, commit("T1", 0, 1), 5000)
        assert ok.code == ResponseCode.SUCCESS
        assert node.store.consumer_offsets.query("G", "T1", 0) == 1

    run_node(tmp_path, body, flushConsumerOffsetInterval=3_600_000)
