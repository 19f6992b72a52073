"""Headers and JSON bodies parsed with limits: whatever bytes a peer sends, the reader either
returns commands or raises FrameError -- never OverflowError, RecursionError or anything else."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.remoting.codec import (
    FRAME_PREFIX,
    MAX_HEADER_BYTES,
    MAX_JSON_DEPTH,
    FrameReader,
    JsonLimitError,
    decode_frame,
    encode_frame,
    loads_bounded,
)
from broker.remoting.codes import SerializeType
from broker.remoting.command import FrameError, RemotingCommand
from contracts.fastjson import loads_fastjson

JAVA_INT = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
SHORT = st.integers(min_value=-(1 << 15), max_value=(1 << 15) - 1)
TEXT = st.text(max_size=40)


def _json_frame(header: bytes | str, body: bytes = b"") -> bytes:
    if isinstance(header, str):
        header = header.encode()
    return FRAME_PREFIX.pack(4 + len(header) + len(body), len(header)) + header + body


@st.composite
def commands(draw) -> RemotingCommand:
    stype = draw(st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))
    return RemotingCommand(
        code=draw(SHORT if stype == SerializeType.ROCKETMQ else JAVA_INT),
        language=draw(st.sampled_from(["JAVA", "PYTHON", "GO", "CPP"])),
        version=draw(SHORT if stype == SerializeType.ROCKETMQ else JAVA_INT),
        opaque=draw(JAVA_INT),
        flag=draw(JAVA_INT),
        remark=draw(st.none() | TEXT),
        ext_fields=draw(st.dictionaries(TEXT, TEXT, max_size=6)),
        body=draw(st.binary(max_size=64)),
        serialize_type=stype,
    )


@given(commands())
@settings(max_examples=300)
def test_any_well_formed_command_round_trips(cmd) -> None:
    got = decode_frame(encode_frame(cmd))
    if cmd.serialize_type == SerializeType.ROCKETMQ and cmd.remark == "":
        cmd.remark = None  # the binary layout has no way to tell "" from absent
    assert got == cmd


# JSON values a hostile peer might put in any header field: huge and non-finite numbers,
# deep nesting, wrong types.
HOSTILE_NUMBERS = st.sampled_from(
    [
        "1e999",
        "-1e999",
        "1" * 5000,
        "9" * 25,
        "2147483648",
        "-2147483649",
        "NaN",
        "Infinity",
        "1.5",
        "true",
        "null",
        '"12"',
        '"x"',
        "[]",
        "{}",
    ]
)
NESTED = st.integers(min_value=1, max_value=60_000).map(lambda n: "[" * n + "]" * n)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
).map(lambda v: json.dumps(v, allow_nan=True))


@given(
    fields=st.dictionaries(
        st.sampled_from(["code", "version", "opaque", "flag", "remark", "language", "extFields"]),
        HOSTILE_NUMBERS | NESTED | JSON_VALUES,
        max_size=7,
    ),
    ext=st.dictionaries(TEXT, HOSTILE_NUMBERS | JSON_VALUES, max_size=3),
)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_hostile_header_fields_parse_or_raise_frame_error(fields, ext) -> None:
    parts = [f"{json.dumps(k)}:{v}" for k, v in fields.items()]
    if "extFields" not in fields:
        parts.append(
            '"extFields":{' + ",".join(f"{json.dumps(k)}:{v}" for k, v in ext.items()) + "}"
        )
    header = "{" + ",".join(parts) + "}"
    try:
        cmd = decode_frame(_json_frame(header))
    except FrameError:
        return
    # what parsed fits Java's int and can be answered
    for value in (cmd.code, cmd.version, cmd.opaque, cmd.flag):
        assert -(1 << 31) <= value < (1 << 31)
    encode_frame(cmd.make_response(0, remark=cmd.remark))


@given(st.binary(max_size=200), st.integers(min_value=1, max_value=17))
@settings(max_examples=300)
def test_arbitrary_bytes_in_any_chunks_never_escape_as_other_errors(data, chunk) -> None:
    reader = FrameReader("fuzz")
    try:
        for i in range(0, len(data), chunk):
            reader.feed(data[i : i + chunk])
    except FrameError:
        pass


@pytest.mark.parametrize(
    "header, reason",
    [
        ('{"code":1e999,"extFields":{}}', "out of range"),
        ('{"code":10,"opaque":' + "9" * 5000 + "}", "integer of"),
        ('{"code":10,"flag":NaN}', "not a JSON number"),
        ('{"code":10,"opaque":2147483648}', "Java's int range"),
        ('{"code":10,"extFields":' + "[" * 50_000 + "]" * 50_000 + "}", "nested deeper"),
        ('{"code":10,"remark":{"a":1}}', "'remark' is not a string"),
        ('{"extFields":{}}', "lacks an integer 'code'"),
    ],
)
def test_each_limit_names_itself(header, reason) -> None:
    with pytest.raises(FrameError, match=reason):
        decode_frame(_json_frame(header))


def test_a_header_above_the_size_limit_is_refused_before_parsing() -> None:
    header = '{"code":10,"remark":"' + "x" * MAX_HEADER_BYTES + '"}'
    with pytest.raises(FrameError, match="exceeds"):
        decode_frame(_json_frame(header))


def test_depth_limit_counts_brackets_outside_strings_only() -> None:
    inside_strings = json.dumps({"k": "[{" * 1000})
    assert loads_bounded(inside_strings) == {"k": "[{" * 1000}
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_bounded(at_limit) is not None
    with pytest.raises(JsonLimitError):
        loads_bounded("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    escaped_quote = '{"k":"\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}'
    assert loads_bounded(escaped_quote)["k"].startswith('"[')


def test_fastjson_bodies_have_the_same_limits() -> None:
    assert loads_fastjson(b'{"offsetTable":{"t@g":{0:5,1:7}}}') == {
        "offsetTable": {"t@g": {"0": 5, "1": 7}}
    }
    for bad in (b'{"a":1e999}', b"[" * 100_000, b"{0:" + b"9" * 5000 + b"}"):
        with pytest.raises(ValueError):
            loads_fastjson(bad)


def test_a_binary_response_code_outside_a_short_is_a_frame_error() -> None:
    cmd = RemotingCommand(code=70_000, serialize_type=SerializeType.ROCKETMQ)
    with pytest.raises(FrameError, match="out of range"):
        encode_frame(cmd)


@given(st.lists(commands(), min_size=1, max_size=6), st.lists(st.integers(1, 300), max_size=20))
@settings(max_examples=200)
def test_frames_split_anywhere_decode_the_same(cmds, cuts) -> None:
    stream = b"".join(encode_frame(c) for c in cmds)
    reader = FrameReader("split")
    got, pos = [], 0
    for cut in cuts:
        got += reader.feed(stream[pos : pos + cut])
        pos += cut
    got += reader.feed(stream[pos:])
    assert reader.pending_bytes == 0
    assert [(c.code, c.opaque, c.ext_fields, c.body) for c in got] == [
        (c.code, c.opaque, c.ext_fields, c.body) for c in cmds
    ]
