"""Remoting frame codec: a builder (encode_frame) and a reader (FrameReader) kept apart.

Frame: ``[i32 length][i32 serializeType<<24 | headerLength][header][body]``; ``length`` counts
everything after itself. Header is JSON (serialize type 0) or RocketMQ's binary layout (type 1).
"""

from __future__ import annotations

import json
import struct

from broker.remoting.codes import SerializeType
from broker.remoting.command import FrameError, RemotingCommand
from contracts.fastjson import (  # noqa: F401 (the limits are part of the wire format)
    MAX_JSON_DEPTH,
    MAX_JSON_INT_DIGITS,
    JsonLimitError,
    check_json_depth,
    loads_bounded,
    parse_int,
)

MAX_FRAME_BYTES = 16 * 1024 * 1024
# A header (JSON or binary) above this is refused: real clients send a few KiB at most (the
# message properties travel in extFields and are bounded by a 32 KiB short length).
MAX_HEADER_BYTES = 1024 * 1024
JAVA_INT_MIN, JAVA_INT_MAX = -(1 << 31), (1 << 31) - 1

FRAME_PREFIX = struct.Struct(
    ">i"  # length: bytes after this field (header-length word + header + body)
    "i"  # serializeType << 24 | headerLength
)

# Binary (ROCKETMQ) header, fixed part.
BIN_HEADER = struct.Struct(
    ">h"  # code
    "B"  # language (LanguageCode ordinal)
    "h"  # version
    "i"  # opaque
    "i"  # flag
)
I32 = struct.Struct(">i")  # remark length, extFields total length, value lengths
I16 = struct.Struct(">h")  # extFields key length

LANGUAGES = [
    "JAVA",
    "CPP",
    "DOTNET",
    "PYTHON",
    "DELPHI",
    "ERLANG",
    "RUBY",
    "OTHER",
    "HTTP",
    "GO",
    "PHP",
    "OMS",
    "RUST",
]  # LanguageCode ordinals


def _language_code(name: str) -> int:
    try:
        return LANGUAGES.index(name)
    except ValueError:
        return LANGUAGES.index("OTHER")


def _ext_str(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


# ---------------------------------------------------------------- builder


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        parts = [
            BIN_HEADER.pack(
                cmd.code, _language_code(cmd.language), cmd.version, cmd.opaque, cmd.flag
            )
        ]
        remark = (cmd.remark or "").encode()
        parts.append(I32.pack(len(remark)) + remark)
        ext = bytearray()
        for key, value in cmd.ext_fields.items():
            k, v = key.encode(), _ext_str(value).encode()
            ext += I16.pack(len(k)) + k + I32.pack(len(v)) + v
        parts.append(I32.pack(len(ext)) + bytes(ext))
        return b"".join(parts)
    # The same JSON as json.dumps of the whole document, with the fixed parts formatted
    # directly: only the remark and extFields go through the encoder.
    language = '"JAVA"' if cmd.language == "JAVA" else _dumps(cmd.language)
    remark = "" if cmd.remark is None else f'"remark":{_dumps(cmd.remark)},'
    ext = {k: v if type(v) is str else _ext_str(v) for k, v in cmd.ext_fields.items()}
    return (
        f'{{"code":{int(cmd.code)},"language":{language},"version":{int(cmd.version)},'
        f'"opaque":{int(cmd.opaque)},"flag":{int(cmd.flag)},"serializeTypeCurrentRPC":"JSON",'
        f'{remark}"extFields":{_dumps(ext)}}}'
    ).encode()


_dumps = json.JSONEncoder(separators=(",", ":")).encode


def encode_frame(cmd: RemotingCommand) -> bytes:
    try:
        header = encode_header(cmd)
    except struct.error as exc:  # a field outside its binary width (code is a short)
        raise FrameError("local", 0, f"header field out of range: {exc}") from exc
    length = 4 + len(header) + len(cmd.body)
    if length + 4 > MAX_FRAME_BYTES:
        raise FrameError("local", 0, f"frame of {length + 4} bytes exceeds {MAX_FRAME_BYTES}")
    return (
        FRAME_PREFIX.pack(length, (int(cmd.serialize_type) << 24) | len(header)) + header + cmd.body
    )


# ---------------------------------------------------------------- reader


def _java_int(doc: dict, name: str, default: int = 0) -> int:
    value = doc.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{name!r} is not an integer: {str(value)[:40]!r}")
    if isinstance(value, str):
        value = parse_int(value.strip())
    if not JAVA_INT_MIN <= value <= JAVA_INT_MAX:
        raise ValueError(f"{name!r} = {value} is outside Java's int range")
    return value


def decode_header(data: bytes, serialize_type: int, where: str, offset: int) -> RemotingCommand:
    if len(data) > MAX_HEADER_BYTES:
        raise FrameError(where, offset, f"header of {len(data)} bytes exceeds {MAX_HEADER_BYTES}")
    if serialize_type == SerializeType.JSON:
        try:
            doc = loads_bounded(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise FrameError(where, offset, f"JSON header does not parse: {exc}") from exc
        if not isinstance(doc, dict):
            raise FrameError(where, offset, "JSON header is not an object")
        if "code" not in doc:
            raise FrameError(where, offset, "JSON header lacks an integer 'code'")
        ext = doc.get("extFields") or {}
        if not isinstance(ext, dict):
            raise FrameError(where, offset, "JSON header 'extFields' is not an object")
        remark = doc.get("remark")
        if remark is not None and not isinstance(remark, str):
            raise FrameError(where, offset, "JSON header 'remark' is not a string")
        try:
            return RemotingCommand(
                code=_java_int(doc, "code"),
                language=str(doc.get("language", "JAVA")),
                version=_java_int(doc, "version"),
                opaque=_java_int(doc, "opaque"),
                flag=_java_int(doc, "flag"),
                remark=remark,
                ext_fields={k: v if type(v) is str else _ext_str(v) for k, v in ext.items()},
                serialize_type=SerializeType.JSON,
            )
        except (TypeError, ValueError) as exc:
            raise FrameError(where, offset, f"JSON header field of the wrong type: {exc}") from exc
    if serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary_header(data, where, offset)
    raise FrameError(where, offset, f"unknown serialize type {serialize_type}")


def _decode_binary_header(data: bytes, where: str, offset: int) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = BIN_HEADER.unpack_from(data, 0)
        pos = BIN_HEADER.size
        (remark_len,) = I32.unpack_from(data, pos)
        pos += 4
        if remark_len < 0 or pos + remark_len > len(data):
            raise FrameError(where, offset, f"binary header remark length {remark_len} invalid")
        remark = data[pos : pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = I32.unpack_from(data, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > len(data):
            raise FrameError(where, offset, f"binary header extFields length {ext_len} invalid")
        ext: dict[str, str] = {}
        while pos < end:
            (klen,) = I16.unpack_from(data, pos)
            pos += 2
            key = data[pos : pos + klen].decode()
            pos += klen
            (vlen,) = I32.unpack_from(data, pos)
            pos += 4
            if klen < 0 or vlen < 0 or pos + vlen > end:
                raise FrameError(where, offset, "binary header extFields entry overruns")
            ext[key] = data[pos : pos + vlen].decode()
            pos += vlen
    except struct.error as exc:
        raise FrameError(where, offset, f"binary header truncated: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise FrameError(where, offset, f"binary header text is not UTF-8: {exc}") from exc
    language = LANGUAGES[lang] if lang < len(LANGUAGES) else "OTHER"
    return RemotingCommand(
        code, language, version, opaque, flag, remark, ext, serialize_type=SerializeType.ROCKETMQ
    )


class FrameReader:
    """Incremental reader: feed() bytes as they arrive, iterate complete commands.

    Raises FrameError (naming the peer and stream offset) on an oversized or malformed frame;
    the caller must then drop the connection.
    """

    def __init__(self, peer: str = "peer", max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.peer = peer
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._consumed = 0  # stream offset of _buf[0]

    def feed(self, data: bytes) -> list[RemotingCommand]:
        buf = self._buf
        buf += data
        out: list[RemotingCommand] = []
        pos, end = 0, len(buf)
        view = memoryview(buf)
        try:
            while end - pos >= 4:
                (length,) = I32.unpack_from(buf, pos)
                at = self._consumed + pos
                if length < 4:
                    raise FrameError(self.peer, at, f"frame length {length} is below the minimum 4")
                if length + 4 > self.max_frame_bytes:
                    raise FrameError(
                        self.peer,
                        at,
                        f"frame length {length + 4} exceeds {self.max_frame_bytes} bytes",
                    )
                if end - pos < 4 + length:
                    break
                (word,) = I32.unpack_from(buf, pos + 4)
                stype, hlen = (word >> 24) & 0xFF, word & 0xFFFFFF
                if hlen > length - 4:
                    raise FrameError(
                        self.peer, at, f"header length {hlen} exceeds frame length {length}"
                    )
                body_at = pos + 8 + hlen
                cmd = decode_header(bytes(view[pos + 8 : body_at]), stype, self.peer, at)
                cmd.body = bytes(view[body_at : pos + 4 + length])
                out.append(cmd)
                pos += 4 + length
        finally:
            view.release()
            if pos:  # one move of the unread tail per feed, not one per frame
                self._consumed += pos
                if pos == end and end > 1 << 20:
                    self._buf = bytearray()  # all read: give a large frame's memory back
                else:
                    del buf[:pos]
        return out

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)

    def clear(self) -> None:
        """Forget a partial frame (its connection is closing) and free its memory."""
        self._buf = bytearray()


def decode_frame(frame: bytes) -> RemotingCommand:
    """Decode exactly one whole frame (tests, tools)."""
    reader = FrameReader("frame")
    cmds = reader.feed(frame)
    if len(cmds) != 1 or reader.pending_bytes:
        raise FrameError(
            "frame",
            0,
            f"expected one whole frame, got {len(cmds)} + {reader.pending_bytes} spare bytes",
        )
    return cmds[0]
