"""Issue 28's hostile-client findings 1 and 2 against a real ``haproof broker`` process on
127.0.0.1: a SEND_BATCH_MESSAGE with a V1 header is checked on the topic it writes (ACL and
system-topic rules), and CONSUMER_SEND_MSG_BACK copies only a message of the origin topic it
names (never a record of a topic the caller may not read)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.acl.signing import AclSigner
from broker.processors.send import encode_batch
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.ids import parse_message_id
from tests.acl.acl_files import GROUP, TOPIC, acl_broker_conf, admin, user
from tests.acl.helpers import send_v2
from tests.support.aio import async_test
from tools.localcluster import LocalProcess, free_port, start_broker, write_broker_conf

SECRET = "SecretTopic"  # the user account has no permission on it (defaultTopicPerm DENY)


def _broker(tmp_path: Path, **props) -> LocalProcess:
    port = free_port()
    conf = write_broker_conf(
        tmp_path / "broker.conf",
        {
            "brokerClusterName": "C",
            "brokerName": "broker-a",
            "storePathRootDir": tmp_path / "store",
            "listenPort": port,
            "haListenPort": free_port(),
            "mappedFileSizeCommitLog": 1 << 20,
            "autoCreateTopicEnable": "true",
            **props,
        },
    )
    return start_broker("broker", conf, port, tmp_path)


def _batch_v1(topic: str, extra: dict | None = None) -> RemotingCommand:
    """SEND_BATCH_MESSAGE (320) with SendMessageRequestHeader's long names (V1)."""
    fields = {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": 0,
        "sysFlag": 0,
        "bornTimestamp": 1,
        "flag": 0,
        "properties": "",
        "reconsumeTimes": 0,
        **(extra or {}),
    }
    body = encode_batch([(0, b"batched", {"WAIT": "true"})])
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, fields, body)


async def _call(addr: str, req: RemotingCommand, signer: AclSigner | None) -> RemotingCommand:
    client = RemotingClient(rpc_hook=signer)
    try:
        return await client.invoke(addr, req, 5000)
    finally:
        await client.close()


def _create(topic: str) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
    )


async def _max_offset(addr: str, topic: str) -> int:
    req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0})
    resp = await _call(addr, req, admin())
    return int(resp.ext_fields.get("offset", 0)) if resp.code == ResponseCode.SUCCESS else 0


@pytest.fixture
def acl_broker(tmp_path):
    proc = _broker(tmp_path, **acl_broker_conf(tmp_path))
    try:
        yield proc
    finally:
        proc.stop()


@async_test
async def test_batch_send_with_a_v1_header_is_held_to_the_acl(acl_broker):
    addr = acl_broker.addr

    for topic in (TOPIC, SECRET):
        assert (await _call(addr, _create(topic), admin())).code == ResponseCode.SUCCESS
    for topic in (SECRET, "NewTopicB", "SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRACE"):
        resp = await _call(addr, _batch_v1(topic), user())
        assert resp.code == ResponseCode.NO_PERMISSION, (topic, resp.code, resp.remark)
    # a V2 field the guard might read beside the V1 one the handler writes: they agree
    both = _batch_v1(SECRET, {"b": TOPIC, "e": 0})
    ok = await _call(addr, both, user())
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    both = _batch_v1(TOPIC, {"b": SECRET, "e": 0})
    assert (await _call(addr, both, user())).code == ResponseCode.NO_PERMISSION
    assert (await _call(addr, _batch_v1(TOPIC), user())).code == ResponseCode.SUCCESS
    assert await _max_offset(addr, SECRET) == 0
    assert await _max_offset(addr, TOPIC) == 2
    topics = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)
    table = (await _call(addr, topics, admin())).body.decode()
    assert "NewTopicB" not in table


def test_batch_send_with_a_v1_header_cannot_reach_system_topics_without_acl(tmp_path):
    proc = _broker(tmp_path)
    try:

        async def main():
            for topic in ("SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRACE_TOPIC"):
                resp = await _call(proc.addr, _batch_v1(topic), None)
                assert resp.code == ResponseCode.NO_PERMISSION, (topic, resp.remark)
            bad = await _call(proc.addr, _batch_v1("../escape"), None)
            assert bad.code == ResponseCode.SYSTEM_ERROR, bad.remark
            assert (await _call(proc.addr, _batch_v1("Fine"), None)).code == ResponseCode.SUCCESS

        asyncio.run(main())
    finally:
        proc.stop()


def _send_back(offset: int, origin_topic: str, delay_level: int = -1) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "group": GROUP,
            "offset": offset,
            "delayLevel": delay_level,
            "originTopic": origin_topic,
            "originMsgId": "x",
            "unitMode": False,
        },
    )


@async_test
async def test_send_back_copies_only_a_message_of_the_origin_topic(acl_broker):
    addr = acl_broker.addr
    dlq = f"%DLQ%{GROUP}"

    for topic in (TOPIC, SECRET):
        assert (await _call(addr, _create(topic), admin())).code == ResponseCode.SUCCESS
    secret = await _call(addr, send_v2(SECRET, b"the secret"), admin())
    assert secret.code == ResponseCode.SUCCESS, secret.remark
    secret_offset = parse_message_id(secret.ext_fields["msgId"])[2]
    stolen = await _call(addr, _send_back(secret_offset, TOPIC), user())
    assert stolen.code == ResponseCode.NO_PERMISSION, stolen.remark
    assert "not a message of topic" in stolen.remark
    assert await _max_offset(addr, dlq) == 0
    mine = await _call(addr, send_v2(TOPIC, b"mine"), user())
    mine_offset = parse_message_id(mine.ext_fields["msgId"])[2]
    back = await _call(addr, _send_back(mine_offset, TOPIC), user())
    assert back.code == ResponseCode.SUCCESS, back.remark
    assert await _max_offset(addr, dlq) == 1
