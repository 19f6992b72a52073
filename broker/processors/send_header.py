"""The send family's header (SendMessageRequestHeader), parsed once per request: the guard checks
the topic it holds and the send handler uses the same object, so the two can never read
different fields (a SEND_BATCH_MESSAGE with a V1 header once passed the guard, which looked at
the V2 field ``b``, and wrote the V1 field ``topic``).

Which names a request uses: SEND_MESSAGE (10) the long ones, SEND_MESSAGE_V2 (310) the
one-letter ones, SEND_BATCH_MESSAGE (320) the one-letter ones when ``b`` is present (RocketMQ's
client), else the long ones. ``send_header(req)`` parses on first use and keeps the result on
the request; a header that does not parse is kept as its error, answered MESSAGE_ILLEGAL.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand

SEND_CODES = frozenset(
    {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE}
)

# SEND_MESSAGE_V2's one-letter header names → SendMessageRequestHeader's names.
V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}
_V2_KEYS = {name: letter for letter, name in V2_NAMES.items()}
_V1_KEYS = {name: name for name in V2_NAMES.values()}


class SendHeaderError(ValueError):
    """A send header that cannot be used: names the field and why. ``response_code``: what
    the request is answered (SYSTEM_ERROR for a missing field, as RocketMQ's header decoding;
    MESSAGE_ILLEGAL for a value that is not a number)."""

    def __init__(self, message: str, response_code: int = ResponseCode.MESSAGE_ILLEGAL) -> None:
        super().__init__(message)
        self.response_code = response_code


def _missing(req: RemotingCommand, key: str) -> SendHeaderError:
    name = V2_NAMES.get(key, key)
    return SendHeaderError(
        f"request code {req.code}: missing header field {name!r}", ResponseCode.SYSTEM_ERROR
    )


@dataclass(frozen=True, slots=True)
class SendHeader:
    topic: str
    topic_field: str  # the header field the topic came from ("topic" or "b")
    default_topic: str | None
    default_nums: int
    queue_id: int
    sys_flag: int
    born_ts: int
    flag: int
    properties: str
    reconsume: int
    batch: bool


def header_keys(req: RemotingCommand) -> dict[str, str]:
    """Long field name → the key this request uses for it."""
    if req.code == RequestCode.SEND_MESSAGE:
        return _V1_KEYS
    if req.code == RequestCode.SEND_BATCH_MESSAGE and "b" not in req.ext_fields:
        return _V1_KEYS
    return _V2_KEYS


def send_header(req: RemotingCommand) -> SendHeader:
    """The request's parsed header (parsed once; SendHeaderError when it does not parse)."""
    cached = req.parsed
    if cached is None:
        try:
            cached = _parse(req)
        except SendHeaderError as exc:
            cached = exc
        req.parsed = cached
    if isinstance(cached, SendHeaderError):
        raise cached
    return cached


def _parse(req: RemotingCommand) -> SendHeader:
    f, k = req.ext_fields, header_keys(req)
    topic = f.get(k["topic"])
    if topic is None:
        raise _missing(req, k["topic"])
    return SendHeader(
        topic=topic,
        topic_field=k["topic"],
        default_topic=f.get(k["defaultTopic"]),
        default_nums=_int(req, k["defaultTopicQueueNums"], 4),
        queue_id=_int(req, k["queueId"], None),
        sys_flag=_int(req, k["sysFlag"], 0),
        born_ts=_int(req, k["bornTimestamp"], 0),
        flag=_int(req, k["flag"], 0),
        properties=f.get(k["properties"]) or "",
        reconsume=_int(req, k["reconsumeTimes"], 0),
        batch=req.code == RequestCode.SEND_BATCH_MESSAGE
        or f.get(k["batch"], "false").lower() == "true",
    )


def _int(req: RemotingCommand, key: str, default: int | None) -> int:
    raw = req.ext_fields.get(key)
    if raw is None:
        if default is not None:
            return default
        raise _missing(req, key)
    try:
        return int(raw)
    except ValueError:
        name = V2_NAMES.get(key, key)
        raise SendHeaderError(f"send header field {name!r} is not an integer: {raw!r}") from None
