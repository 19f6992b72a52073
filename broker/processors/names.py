"""Topic and consumer group names, validated as RocketMQ does (TopicValidator, Validators)
before any handler runs, so no name ever becomes a path or a table key it should not.

- A topic: 1 to 127 characters of ``[%|a-zA-Z0-9_-]`` (so never ``.``, ``/``, whitespace, a
  newline or an empty string). Clients may not send to system topics (TBW102,
  SCHEDULE_TOPIC_XXXX, RMQ_SYS_*...): NO_PERMISSION, as RocketMQ's NOT_ALLOWED_SEND_TOPIC_SET.
- A group: the same characters, at most 120, so that its retry and dead-letter topics
  (``%RETRY%{group}``, ``%DLQ%{group}``), which are directories of the store, are valid topics.

``name_refusal(req)`` checks every name ``broker.acl.permission.request_resources`` finds in a
request (header fields and a heartbeat's body).
"""

from __future__ import annotations

import functools
import re

from broker.acl.permission import request_resources
from broker.processors.send_header import SEND_CODES, SendHeaderError, send_header
from broker.remoting.codes import ResponseCode
from broker.remoting.command import RemotingCommand

TOPIC_MAX_LENGTH = 127
# RocketMQ TopicValidator's system topics that an update may not touch.
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
GROUP_MAX_LENGTH = TOPIC_MAX_LENGTH - len("%RETRY%")
_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")
_SHOWN_CHARS = 60  # a bad name is quoted in the remark up to this many characters


def _shown(name: str) -> str:
    return repr(name if len(name) <= _SHOWN_CHARS else name[:_SHOWN_CHARS] + "...")


def topic_problem(topic: str) -> str | None:
    """Why ``topic`` is not a topic name (RocketMQ's remarks), or None."""
    if len(topic) > TOPIC_MAX_LENGTH:  # before the cache: it only ever holds short names
        return f"The specified topic {_shown(topic)} is longer than topic max length {TOPIC_MAX_LENGTH}."
    return _short_topic_problem(topic)


@functools.lru_cache(maxsize=4096)  # the send path asks about the same few topics all day
def _short_topic_problem(topic: str) -> str | None:
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if not _VALID.fullmatch(topic):
        return (
            f"The specified topic {_shown(topic)} contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )
    return None


def is_reserved_for_send(topic: str) -> bool:
    """A system topic, its prefix in any case: clients may not send to it, an administrator may
    not delete it (topic_admin.py)."""
    return topic in SYSTEM_TOPICS or topic.lower().startswith(SYSTEM_TOPIC_PREFIX)


def group_problem(group: str) -> str | None:
    if len(group) > GROUP_MAX_LENGTH:
        return f"The specified group {_shown(group)} is longer than {GROUP_MAX_LENGTH} characters."
    return _short_group_problem(group)


@functools.lru_cache(maxsize=4096)
def _short_group_problem(group: str) -> str | None:
    if not group or not group.strip():
        return "The specified group is blank."
    if not _VALID.fullmatch(group):
        return (
            f"The specified group {_shown(group)} contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )
    return None


_SEND_VERDICTS: dict[str, tuple[ResponseCode, str] | None] = {}  # short topics only
_SEND_VERDICTS_MAX = 4096


def send_topic_refusal(topic: str, field: str) -> tuple[ResponseCode, str] | None:
    """The verdict on a send's topic (the hot path: one dict lookup once a topic is known)."""
    try:
        return _SEND_VERDICTS[topic]
    except KeyError:
        pass
    problem = topic_problem(topic)
    if problem is not None:
        verdict = ResponseCode.SYSTEM_ERROR, f"{problem} (field {field})"
    elif is_reserved_for_send(topic):
        verdict = (
            ResponseCode.NO_PERMISSION,
            f"Sending message to topic[{topic}] is forbidden (a system topic).",
        )
    else:
        verdict = None
    if len(topic) <= TOPIC_MAX_LENGTH:  # a long name never enters the cache
        if len(_SEND_VERDICTS) >= _SEND_VERDICTS_MAX:
            _SEND_VERDICTS.clear()
        _SEND_VERDICTS[topic] = verdict
    return verdict


def name_refusal(req: RemotingCommand) -> tuple[ResponseCode, str] | None:
    """(response code, remark) refusing ``req`` for a bad name, or None."""
    if req.code in SEND_CODES:
        return send_refusal(req)
    for res in request_resources(req):
        if res.kind == "group":
            problem = group_problem(res.name)
        else:
            problem = topic_problem(res.name)
        if problem is not None:
            return ResponseCode.SYSTEM_ERROR, f"{problem} (field {res.source})"
    return None


def send_refusal(req: RemotingCommand) -> tuple[ResponseCode, str] | None:
    """The send family: the verdict on the topic the handler will use (send_header.py)."""
    try:
        header = send_header(req)
    except SendHeaderError as exc:
        return ResponseCode(exc.response_code), str(exc)
    return send_topic_refusal(header.topic, header.topic_field)
