"""The guard and the handlers agree on what a request names: every request code the broker serves,
with every header version it accepts, is given a different name in every field that can name a
topic or a group; each field the handler then reads must be one the guard checked (for the send
family the handler reads nothing of the raw header at all: it gets the guard's parse)."""

from __future__ import annotations

import asyncio

import pytest

import broker.node
from broker.acl.permission import request_resources
from broker.processors.names import name_refusal
from broker.remoting.codes import RequestCode as R
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import Eager
from tests.acl.helpers import run_node

# Every header field that names a topic or a group anywhere in the broker, long and V2 names.
NAMING_FIELDS = (
    "topic",
    "b",
    "originTopic",
    "group",
    "consumerGroup",
    "producerGroup",
    "a",
    "groupName",
)
# Read but never a destination or a permission: the auto-create template and the producer group.
NOT_RESOURCES = frozenset({"defaultTopic", "c", "producerGroup", "a"})
NUMBERS = {
    "queueId": 0,
    "e": 0,
    "queueOffset": 0,
    "maxMsgNums": 1,
    "sysFlag": 0,
    "f": 0,
    "commitOffset": 0,
    "suspendTimeoutMillis": 0,
    "offset": 0,
    "delayLevel": 0,
    "timestamp": 0,
    "bornTimestamp": 1,
    "g": 1,
    "flag": 0,
    "h": 0,
    "reconsumeTimes": 0,
    "j": 0,
    "defaultTopicQueueNums": 4,
    "d": 4,
    "readQueueNums": 1,
    "writeQueueNums": 1,
    "perm": 6,
}

V1_SEND = ("topic", "defaultTopic", "queueId", "sysFlag", "bornTimestamp", "flag")
V2_SEND = ("b", "c", "e", "f", "g", "h")


class Recording(dict):
    """A header that remembers which keys were read."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


def _headers(code: int) -> list[dict[str, str]]:
    """Every header version of ``code``: for the send family V1, V2 and both at once."""
    naming = {f: f"N{f}" for f in NAMING_FIELDS}
    base = {**{k: str(v) for k, v in NUMBERS.items()}, **naming}
    if code == R.SEND_MESSAGE:
        versions = [V1_SEND]
    elif code == R.SEND_MESSAGE_V2:
        versions = [V2_SEND]
    elif code == R.SEND_BATCH_MESSAGE:
        versions = [V1_SEND, V2_SEND, V1_SEND + V2_SEND]
    else:
        return [base]
    send_names = set(V1_SEND) | set(V2_SEND)
    out = []
    for version in versions:
        header = {k: v for k, v in base.items() if k not in send_names or k in version}
        header.update({"c": "TBW102", "defaultTopic": "TBW102"})
        out.append(header)
    return out


def _capture_raw_table(monkeypatch) -> dict:
    captured = {}
    real = broker.node.guarded

    def spy(processors, *args, **kw):
        captured.update(processors)
        return real(processors, *args, **kw)

    monkeypatch.setattr(broker.node, "guarded", spy)
    return captured


@pytest.mark.parametrize("acl", [False, True])
def test_every_handler_reads_only_the_names_the_guard_checked(tmp_path, monkeypatch, acl):
    raw = _capture_raw_table(monkeypatch)

    async def body(node, client, addr):
        class Conn:
            peer = "127.0.0.1:5555"
            attrs: dict = {}

        assert len(raw) >= 25, sorted(raw)
        seen_send_versions = 0
        disagreements = []
        for code in sorted(raw):
            for header in _headers(code):
                req = RemotingCommand.request(code, {})
                req.ext_fields = Recording(header)
                checked = {r.source for r in request_resources(req)}
                name_refusal(req)  # the guard's whole parse, as dispatch does it
                req.ext_fields.read.clear()
                handler = raw[code]
                fn = handler.fn if type(handler) is Eager else handler
                try:
                    await asyncio.wait_for(fn(Conn(), req), 5)
                except Exception:  # noqa: BLE001 - only the fields read matter here
                    pass
                read = req.ext_fields.read & set(NAMING_FIELDS)
                unchecked = read - checked - NOT_RESOURCES
                if unchecked:
                    disagreements.append((code, sorted(unchecked), sorted(checked)))
                if code in (R.SEND_MESSAGE, R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE):
                    assert req.ext_fields.read == set(), (code, sorted(req.ext_fields.read))
                    seen_send_versions += 1
        assert not disagreements, disagreements
        assert seen_send_versions == 5

    kw = {}
    if acl:
        from tests.acl.acl_files import acl_broker_conf

        kw = acl_broker_conf(tmp_path)
    run_node(tmp_path, body, **kw)
