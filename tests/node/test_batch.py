"""Batch send: the MessageBatch body codec, SEND_BATCH_MESSAGE (320) and V2 with batch=true on
an in-process node, and Producer.send_batch against real namesrv + broker processes."""

import asyncio
import struct

import pytest

from broker.client.producer import Producer
from broker.processors.send import BatchFormatError, decode_batch, encode_batch
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.record.ids import parse_message_id
from contracts.record.properties import properties_to_string
from tests.support.nodes import run_node as support_run_node


def run_node(tmp_path, body):
    # the default 1 GiB commit log files, as this module always ran
    support_run_node(tmp_path, body, mappedFileSizeCommitLog=1 << 30)


def batch_request(topic, items, code=RequestCode.SEND_BATCH_MESSAGE, queue_id=1, props=""):
    return RemotingCommand.request(
        code,
        {
            "a": "PG",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": queue_id,
            "f": 0,
            "g": 1,
            "h": 0,
            "i": props,
            "j": 0,
            "k": False,
            "m": True,
        },
        encode_batch(items),
    )


def items(n, prefix="m"):
    return [
        (i, f"{prefix}{i}".encode() * 10, {"TAGS": f"T{i % 2}", "UNIQ_KEY": f"U{prefix}{i}"})
        for i in range(n)
    ]


def test_codec_matches_rocketmq_layout_and_round_trips():
    body = encode_batch([(7, b"abc", {"TAGS": "x"})])
    props = properties_to_string({"TAGS": "x"}).encode()
    # TOTALSIZE, MAGICCODE 0, BODYCRC 0, FLAG, body len + body, short props len + props
    expected = struct.pack(">iiiii", 20 + 3 + 2 + len(props), 0, 0, 7, 3) + b"abc"
    expected += struct.pack(">h", len(props)) + props
    assert body == expected
    assert decode_batch(body + body) == [(7, b"abc", {"TAGS": "x"})] * 2


@pytest.mark.parametrize(
    "mangle, what",
    [
        (lambda b: b[:-1], "TOTALSIZE 29 outside the 28-byte body"),
        (lambda b: b[:23] + struct.pack(">h", 9) + b[25:], "properties length 9 does not end"),
        (lambda b: b + b"\x00\x00", "bytes left"),
        (lambda b: struct.pack(">i", 9999) + b[4:], "TOTALSIZE 9999"),
        (lambda b: b[:16] + struct.pack(">i", 500) + b[20:], "body length 500"),
        (lambda b: b"", "no message"),
    ],
)
def test_bad_batch_bodies_name_the_item_and_offset(mangle, what):
    good = encode_batch([(0, b"abc", {"A": "1"})])
    with pytest.raises(BatchFormatError, match=what):
        decode_batch(mangle(good))


@pytest.mark.parametrize("code", [RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_MESSAGE_V2])
def test_batch_is_stored_contiguously_with_joined_ids(tmp_path, code):
    async def body(node, client, addr):
        await client.invoke(addr, batch_request("B", items(1, "warm")))
        r = await client.invoke(addr, batch_request("B", items(5), code=code))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert (r.int_field("queueId"), r.int_field("queueOffset")) == (1, 1)
        ids = r.field("msgId").split(",")
        assert len(ids) == 5
        offsets = [parse_message_id(i)[2] for i in ids]
        cq = node.store.queues[("B", 1)]
        assert [cq.get(qo)[0] for qo in range(1, 6)] == offsets
        for qo, (phy, size, _) in enumerate([cq.get(q) for q in range(1, 6)]):
            rec = node.store.look_message_by_offset(phy)
            assert rec.body == f"m{qo}".encode() * 10 and rec.flag == qo
            assert rec.properties["UNIQ_KEY"] == f"Um{qo}" and rec.queue_offset == qo + 1
            assert rec.crc_ok
            if qo < 4:  # back to back in the commit log
                assert offsets[qo + 1] == phy + size

    run_node(tmp_path, body)


def test_batch_refusals(tmp_path):
    async def body(node, client, addr):
        delayed = [(0, b"x", {"DELAY": "1"})]
        r = await client.invoke(addr, batch_request("B", delayed))
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "delay" in r.remark
        r = await client.invoke(addr, batch_request("%RETRY%G", items(2)))
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "retry" in r.remark
        req = batch_request("B", items(2))
        req.body = req.body[:-3]
        r = await client.invoke(addr, req)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "batch item 1" in r.remark
        assert ("B", 1) not in node.store.queues  # nothing half-stored

    run_node(tmp_path, body)


def test_producer_send_batch_on_real_processes(start_broker, namesrv):
    broker = start_broker()

    async def main():
        producer = Producer("PG", [namesrv.addr])
        try:
            msgs = [(f"b{i}".encode(), {"TAGS": "t", "KEYS": f"k{i}"}) for i in range(10)]
            r1 = await producer.send_batch("BatchTopic", msgs)
            r2 = await producer.send_batch("BatchTopic", msgs[:3])
            assert len(r1.offset_msg_id.split(",")) == 10 and len(r1.msg_id.split(",")) == 10
            if r2.queue == r1.queue:
                assert r2.queue_offset == r1.queue_offset + 10
        finally:
            await producer.close()

    asyncio.run(main())
    assert broker.terminate() == 0
