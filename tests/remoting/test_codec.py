import json
import struct

import pytest

from broker.remoting.codec import (
    MAX_FRAME_BYTES,
    FrameReader,
    decode_frame,
    encode_frame,
)
from broker.remoting.codes import RequestCode, ResponseCode, SerializeType
from broker.remoting.command import FrameError, MissingFieldError, RemotingCommand
from contracts.fastjson import loads_fastjson


def test_request_and_response_code_numbers():
    assert RequestCode.SEND_MESSAGE == 10 and RequestCode.PULL_MESSAGE == 11
    assert RequestCode.QUERY_CONSUMER_OFFSET == 14 and RequestCode.UPDATE_CONSUMER_OFFSET == 15
    assert RequestCode.GET_ALL_TOPIC_CONFIG == 21 and RequestCode.GET_BROKER_RUNTIME_INFO == 28
    assert RequestCode.SEARCH_OFFSET_BY_TIMESTAMP == 29 and RequestCode.GET_MAX_OFFSET == 30
    assert RequestCode.GET_MIN_OFFSET == 31 and RequestCode.HEART_BEAT == 34
    assert RequestCode.UNREGISTER_CLIENT == 35 and RequestCode.CONSUMER_SEND_MSG_BACK == 36
    assert RequestCode.GET_CONSUMER_LIST_BY_GROUP == 38
    assert RequestCode.NOTIFY_CONSUMER_IDS_CHANGED == 40
    assert RequestCode.GET_ALL_CONSUMER_OFFSET == 43 and RequestCode.GET_ALL_DELAY_OFFSET == 45
    assert RequestCode.GET_KV_CONFIG == 101 and RequestCode.REGISTER_BROKER == 103
    assert RequestCode.UNREGISTER_BROKER == 104 and RequestCode.GET_ROUTEINFO_BY_TOPIC == 105
    assert RequestCode.GET_BROKER_CLUSTER_INFO == 106
    assert RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG == 201
    assert RequestCode.SEND_MESSAGE_V2 == 310 and RequestCode.SEND_BATCH_MESSAGE == 320
    assert RequestCode.QUERY_DATA_VERSION == 322
    assert ResponseCode.SUCCESS == 0 and ResponseCode.SYSTEM_ERROR == 1
    assert ResponseCode.SYSTEM_BUSY == 2 and ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert ResponseCode.FLUSH_DISK_TIMEOUT == 10 and ResponseCode.SLAVE_NOT_AVAILABLE == 11
    assert ResponseCode.FLUSH_SLAVE_TIMEOUT == 12 and ResponseCode.TOPIC_NOT_EXIST == 17
    assert ResponseCode.PULL_NOT_FOUND == 19 and ResponseCode.PULL_RETRY_IMMEDIATELY == 20
    assert ResponseCode.PULL_OFFSET_MOVED == 21 and ResponseCode.QUERY_NOT_FOUND == 22


def _java_json_frame(header: dict, body: bytes = b"") -> bytes:
    h = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(h) + len(body), len(h)) + h + body


def test_decodes_java_client_json_frame_with_mixed_ext_values():
    frame = _java_json_frame(
        {
            "code": 105,
            "extFields": {"topic": "T", "queueId": 3, "batch": False},
            "flag": 0,
            "language": "JAVA",
            "opaque": 42,
            "serializeTypeCurrentRPC": "JSON",
            "version": 399,
        },
        b"xyz",
    )
    cmd = decode_frame(frame)
    assert cmd.code == 105 and cmd.opaque == 42 and cmd.version == 399
    assert cmd.ext_fields == {"topic": "T", "queueId": "3", "batch": "false"}
    assert cmd.body == b"xyz" and not cmd.is_response and not cmd.is_oneway
    assert cmd.serialize_type == SerializeType.JSON


def test_response_json_matches_java_broker_shape():
    req = decode_frame(_java_json_frame({"code": 34, "opaque": 7, "flag": 0, "version": 1}))
    resp = req.make_response(ResponseCode.SUCCESS, ext_fields={"n": 5, "ok": True})
    frame = encode_frame(resp)
    (length, word) = struct.unpack_from(">ii", frame)
    assert length == len(frame) - 4 and word >> 24 == 0
    header = json.loads(frame[8 : 8 + (word & 0xFFFFFF)])
    assert header["flag"] == 1 and header["opaque"] == 7 and header["code"] == 0
    assert header["extFields"] == {"n": "5", "ok": "true"}
    assert header["serializeTypeCurrentRPC"] == "JSON"


def _golden_binary_frame() -> bytes:
    # built by hand from RocketMQSerializable's documented layout
    ext = b"".join(
        struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
        for k, v in [(b"topic", b"TopicA"), (b"queueId", b"2")]
    )
    header = (
        struct.pack(">hBhii", 11, 1, 317, 99, 2)  # code, language CPP, version, opaque, oneway
        + struct.pack(">i", 2)
        + b"hi"
        + struct.pack(">i", len(ext))
        + ext
    )
    body = b"BODY"
    return struct.pack(">ii", 4 + len(header) + len(body), (1 << 24) | len(header)) + header + body


def test_binary_rocketmq_header_decodes_and_reencodes_identically():
    frame = _golden_binary_frame()
    cmd = decode_frame(frame)
    assert cmd.serialize_type == SerializeType.ROCKETMQ
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque) == (11, "CPP", 317, 99)
    assert cmd.is_oneway and cmd.remark == "hi" and cmd.body == b"BODY"
    assert cmd.ext_fields == {"topic": "TopicA", "queueId": "2"}
    assert encode_frame(cmd) == frame


def test_response_keeps_serialize_type_of_request():
    cmd = decode_frame(_golden_binary_frame())
    resp = decode_frame(encode_frame(cmd.make_response(0, remark="r", ext_fields={"a": 1})))
    assert resp.serialize_type == SerializeType.ROCKETMQ and resp.is_response
    assert resp.ext_fields == {"a": "1"} and resp.remark == "r" and resp.opaque == 99


def test_reader_handles_split_and_coalesced_frames():
    frames = b"".join(encode_frame(RemotingCommand.request(34, {"i": i})) for i in range(3))
    reader = FrameReader("t")
    got = []
    for i in range(0, len(frames), 7):
        got += reader.feed(frames[i : i + 7])
    assert [c.ext_fields["i"] for c in got] == ["0", "1", "2"] and reader.pending_bytes == 0


def test_oversized_frame_rejected_with_offset():
    reader = FrameReader("peer:1")
    ok = encode_frame(RemotingCommand.request(34))
    with pytest.raises(FrameError) as info:
        reader.feed(ok + struct.pack(">ii", MAX_FRAME_BYTES, 10))
    assert info.value.offset == len(ok) and "exceeds" in str(info.value)
    assert "peer:1" in str(info.value)


@pytest.mark.parametrize(
    "frame, reason",
    [
        (struct.pack(">ii", 2, 0), "below the minimum"),
        (struct.pack(">ii", 8, 100) + b"{}{}", "header length"),
        (struct.pack(">ii", 7, 3) + b"{x}", "does not parse"),
        (struct.pack(">ii", 6, 2) + b"[]", "not an object"),
        (struct.pack(">ii", 6, 2) + b"{}", "lacks an integer 'code'"),
        (struct.pack(">ii", 7, (5 << 24) | 3) + b"abc", "unknown serialize type"),
        (struct.pack(">ii", 7, (1 << 24) | 3) + b"abc", "binary header truncated"),
    ],
)
def test_malformed_frames_name_the_reason(frame, reason):
    with pytest.raises(FrameError, match=reason):
        FrameReader("p").feed(frame)


def test_missing_field_names_the_field():
    with pytest.raises(MissingFieldError, match="'topic'"):
        RemotingCommand.request(105).field("topic")


def test_fastjson_unquoted_integer_keys():
    doc = loads_fastjson(b'{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"}}')
    assert doc == {"brokerAddrs": {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"}}
