"""The RemotingCommand value: one request or response on a remoting connection."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from broker.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, SerializeType
from contracts.errors import RemotingError

_opaques = itertools.count(1)


class MissingFieldError(RemotingError):
    """A request lacks a header field its handler needs."""

    def __init__(self, field_name: str, code: int) -> None:
        super().__init__(f"request code {code}: missing header field {field_name!r}")
        self.field_name = field_name


class FrameError(RemotingError):
    """Bytes on a connection are not a valid remoting frame."""

    def __init__(self, peer: str, offset: int, reason: str) -> None:
        super().__init__(f"{peer}: bad remoting frame at stream offset {offset}: {reason}")
        self.peer = peer
        self.offset = offset
        self.reason = reason


@dataclass
class RemotingCommand:
    code: int
    language: str = "JAVA"
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON
    # what the request guard parsed of the header, handed to the handler (never on the wire)
    parsed: object = field(default=None, repr=False, compare=False)

    @classmethod
    def request(
        cls, code: int, ext_fields: dict | None = None, body: bytes = b"", oneway: bool = False
    ) -> RemotingCommand:
        return cls(
            code=int(code),
            opaque=next(_opaques),
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields={
                k: v if type(v) is str else _as_str(v)
                for k, v in (ext_fields or {}).items()
                if v is not None
            },
            body=body,
        )

    def make_response(
        self, code: int, remark: str | None = None, ext_fields: dict | None = None, body=b""
    ) -> RemotingCommand:
        """A response to this request: same opaque and serialize type, flag bit 0 set."""
        return RemotingCommand(
            code=int(code),
            version=self.version,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields={k: _as_str(v) for k, v in (ext_fields or {}).items() if v is not None},
            body=body,
            serialize_type=self.serialize_type,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def field(self, name: str) -> str:
        """A required header field; MissingFieldError names it when absent."""
        value = self.ext_fields.get(name)
        if value is None:
            raise MissingFieldError(name, self.code)
        return value

    def int_field(self, name: str) -> int:
        raw = self.field(name)
        try:
            return int(raw)
        except ValueError as exc:
            raise RemotingError(
                f"request code {self.code}: header field {name!r} is not an integer: {raw!r}"
            ) from exc

    def opt_field(self, name: str, default: str | None = None) -> str | None:
        return self.ext_fields.get(name, default)


def _as_str(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
