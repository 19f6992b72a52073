"""plain_acl.yml parsing, address patterns and RocketMQ's permission rules (unit)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.acl.accounts import ANY, DENY, PUB, SUB, AddressPattern, PlainAcl, parse_perm
from broker.acl.permission import AclChecker, check_permission
from broker.acl.signing import AclSigner
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from contracts.errors import ConfigError
from tests.acl.acl_files import PLAIN_ACL, user


def test_rocketmq_example_file_parses():
    acl = PlainAcl.from_text(
        """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""
    )
    acc = acl.accounts["RocketMQ"]
    assert acc.resource_perms == {
        "topicA": DENY,
        "topicB": PUB | SUB,
        "topicC": SUB,
        "%RETRY%groupA": DENY,
        "%RETRY%groupB": PUB | SUB,
        "%RETRY%groupC": SUB,
    }
    assert acc.default_group_perm == SUB and acc.default_topic_perm == DENY
    assert acl.accounts["rocketmq2"].admin
    assert acl.globally_white("10.10.103.7") and not acl.globally_white("10.10.104.7")


@pytest.mark.parametrize(
    "text, where",
    [
        ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "at least 6"),
        (
            "accounts:\n  - accessKey: abcdefg\n    secretKey: 12345678\n    topicPerms: [a=RW]\n",
            "permission 'RW'",
        ),
        (
            "accounts:\n  - accessKey: abcdefg\n    secretKey: 12345678\n    admin: yes please\n",
            "admin must be",
        ),
        (
            "accounts:\n  - accessKey: abcdefg\n    secretKey: 12345678\n    secretkey: x\n",
            "unknown keys secretkey",
        ),
        ("globalWhiteRemoteAddresses: [10.1.x.1]\n", "not an address pattern"),
        ("accounts: {a: 1}\n", "expected a list"),
        ("[unclosed\n", "not YAML"),
    ],
)
def test_bad_files_name_what_and_where(text, where):
    with pytest.raises(ConfigError) as err:
        PlainAcl.from_text(text, "conf/plain_acl.yml")
    assert "conf/plain_acl.yml" in str(err.value) and where in str(err.value)
    assert "12345678" not in str(err.value)  # never a secret in a message


@pytest.mark.parametrize(
    "pattern, yes, no",
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("192.168.0.*", ["192.168.0.9"], ["192.168.1.9", "::1"]),
        ("192.168.1.1-5", ["192.168.1.1", "192.168.1.5"], ["192.168.1.6"]),
        ("192.168.1.{3,8}", ["192.168.1.3", "192.168.1.8"], ["192.168.1.4"]),
        ("10.0.0.0/8", ["10.200.3.4"], ["11.0.0.1"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2", "not-an-ip"]),
        ("::1", ["::1"], ["127.0.0.1"]),
    ],
)
def test_address_patterns(pattern, yes, no):
    p = AddressPattern(pattern, "test")
    assert all(p.matches(h) for h in yes) and not any(p.matches(h) for h in no)


def test_permission_rules_are_rocketmqs():
    assert check_permission(PUB, PUB | SUB) and check_permission(SUB, SUB)
    assert not check_permission(PUB, SUB) and not check_permission(SUB, PUB)
    assert (
        check_permission(ANY, SUB) and check_permission(ANY, PUB) and not check_permission(ANY, 0)
    )
    assert not check_permission(SUB, DENY | SUB)
    assert parse_perm(None, "x") == DENY and parse_perm("sub|pub", "x") == PUB | SUB


def _pull(group="OrderGroup", topic="OrderTopic"):
    req = RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {"consumerGroup": group, "topic": topic, "queueId": 0, "queueOffset": 0},
    )
    return req


def test_whitelists_skip_the_signature():
    acl = PlainAcl.from_text(
        PLAIN_ACL.replace("globalWhiteRemoteAddresses:", "globalWhiteRemoteAddresses: [10.9.*.*]")
    )
    checker = AclChecker(acl)
    assert checker.refusal(_pull(), "10.9.1.1") is None  # unsigned, but globally white
    assert "not signed" in checker.refusal(_pull(), "10.8.1.1")
    signed = _pull()
    user()(signed)
    assert checker.refusal(signed, "10.8.1.1") is None
    denied = _pull(topic="Elsewhere")
    user()(denied)
    assert "no SUB on topic 'Elsewhere'" in checker.refusal(denied, "10.8.1.1")


def test_refusals_are_logged_once_per_peer_and_reason(caplog):
    checker = AclChecker(PlainAcl.from_text(PLAIN_ACL))
    for port in range(100):
        checker.log_refusal(f"10.0.0.1:{port}", _pull(), "the request is not signed")
    checker.log_refusal("10.0.0.2:1", _pull(), "the request is not signed")
    lines = [r for r in caplog.records if "ACL: refused" in r.getMessage()]
    assert len(lines) == 2


def test_the_file_is_reloaded_when_it_changes_and_a_bad_change_keeps_the_old_accounts(
    tmp_path, caplog
):
    import os

    from tests.acl.acl_files import write_acl

    path = write_acl(tmp_path)
    checker = AclChecker.from_file(str(path), reload_check_ms=0)  # look at every request
    newcomer = AclSigner("newcomer1", "newSecret1")

    def signed():
        req = _pull()
        newcomer(req)  # a new nonce each time: the same signed request is accepted once
        return req

    assert "no ACL account" in checker.refusal(signed(), "10.0.0.1")

    def rewrite(text: str, bump_s: int) -> None:
        path.write_text(text)
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump_s * 1_000_000_000))

    rewrite(PLAIN_ACL + "  - accessKey: newcomer1\n    secretKey: newSecret1\n    admin: true\n", 1)
    assert checker.refusal(signed(), "10.0.0.1") is None
    rewrite("accounts: [oops\n", 2)
    assert checker.refusal(signed(), "10.0.0.1") is None  # still the last good file
    assert any("cannot be used" in r.getMessage() for r in caplog.records)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_accounts_or_one_config_error(text):
    try:
        PlainAcl.from_text(text, "fuzz.yml")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.yml")


def test_deeply_nested_yaml_is_a_config_error():
    with pytest.raises(ConfigError):
        PlainAcl.from_text("accounts: " + "[" * 5000 + "]" * 5000, "deep.yml")
