"""The classic HA stream's two shapes (RocketMQ 4.x HAConnection/HAClient)."""

import struct

import pytest

from broker.ha import wire


def test_report_is_one_big_endian_long():
    assert wire.build_report(0x0102030405060708) == bytes(range(1, 9))
    assert wire.read_report(struct.pack(">q", 1 << 40)) == 1 << 40


def test_header_is_offset_then_size():
    data = wire.build_header(1 << 30, 32 * 1024)
    assert data == struct.pack(">qi", 1 << 30, 32768) and len(data) == 12
    assert wire.read_header(data) == (1 << 30, 32768)
    assert wire.read_header(wire.build_header(77, 0)) == (77, 0)  # a heartbeat


@pytest.mark.parametrize(
    "data,match",
    [
        (struct.pack(">qi", -5, 10), "negative offset"),
        (struct.pack(">qi", 0, -1), "-1 bytes"),
        (struct.pack(">qi", 0, wire.MAX_BODY_BYTES + 1), "bytes at 0"),
    ],
)
def test_garbage_headers_are_protocol_errors(data, match):
    with pytest.raises(wire.HAProtocolError, match=match):
        wire.read_header(data)


def test_negative_report_is_a_protocol_error():
    with pytest.raises(wire.HAProtocolError, match="negative"):
        wire.read_report(struct.pack(">q", -1))


def test_the_controller_mode_header_adds_the_confirm_offset():
    data = wire.build_header(4096, 100, 4000)
    assert data == struct.pack(">qiq", 4096, 100, 4000) and len(data) == wire.CONFIRM_HEADER.size
    assert wire.read_confirm_header(data) == (4096, 100, 4000)
    with pytest.raises(wire.HAProtocolError, match="negative confirmOffset"):
        wire.read_confirm_header(struct.pack(">qiq", 0, 0, -1))
    with pytest.raises(wire.HAProtocolError, match="negative offset"):
        wire.read_confirm_header(struct.pack(">qiq", -1, 0, 0))
