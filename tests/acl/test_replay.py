"""The checking side of request-bound signatures: once per nonce, within the time window; the
RocketMQ scheme only for non-admin requests and only while the file allows it; the example
file's CHANGE-ME keys never load."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.acl.accounts import PlainAcl
from broker.acl.permission import AclChecker
from broker.acl.replay import ReplayGuard
from broker.acl.signing import AclSigner
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from contracts.errors import ConfigError
from tests.acl.acl_files import ADMIN_AK, ADMIN_SK, PLAIN_ACL, TOPIC, USER_AK, USER_SK

REPO = Path(__file__).resolve().parents[2]
HOST = "10.0.0.9"


def _send() -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE, {"topic": TOPIC, "queueId": 0, "producerGroup": "PG"}, b"x"
    )


def _reset() -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": "G", "offset": 0}
    )


def test_a_signed_request_is_accepted_once_and_only_within_the_window():
    checker = AclChecker(PlainAcl.from_text(PLAIN_ACL))
    req = _send()
    AclSigner(USER_AK, USER_SK)(req)
    assert checker.refusal(req, HOST) is None
    assert "used already" in checker.refusal(req, HOST)
    old = _send()
    AclSigner(USER_AK, USER_SK, clock_ms=lambda: 1_000_000)(old)
    assert "from this node's clock" in checker.refusal(old, HOST)
    tampered = _send()
    AclSigner(USER_AK, USER_SK)(tampered)
    tampered.ext_fields["SignTimestamp"] = str(int(tampered.ext_fields["SignTimestamp"]) + 1)
    assert "signature mismatch" in checker.refusal(tampered, HOST)


def test_the_nonce_cache_forgets_only_what_the_window_refuses_and_is_bounded():
    now = [1_000_000]
    guard = ReplayGuard(window_ms=1000, max_nonces=3, clock_ms=lambda: now[0])
    assert guard.refusal("ak", str(now[0]), "n1") is None
    assert "used already" in guard.refusal("ak", str(now[0]), "n1")
    assert guard.refusal("other", str(now[0]), "n1") is None  # per account
    assert guard.refusal("ak", str(now[0]), "n2") is None
    assert "more than 3" in guard.refusal("ak", str(now[0]), "n3")
    now[0] += 1001  # n1's timestamp is out of the window: forgotten, and refused by the window
    assert "clock" in guard.refusal("ak", str(now[0] - 1001), "n1")
    assert guard.refusal("ak", str(now[0]), "n3") is None
    assert "SignNonce" in guard.refusal("ak", str(now[0]), "")
    assert "SignTimestamp" in guard.refusal("ak", "soon", "n4")


def test_rocketmq_scheme_only_for_non_admin_requests_and_only_when_allowed():
    checker = AclChecker(PlainAcl.from_text(PLAIN_ACL))
    legacy_send = _send()
    AclSigner(USER_AK, USER_SK, legacy=True)(legacy_send)
    assert checker.refusal(legacy_send, HOST) is None  # RocketMQ's clients keep working
    legacy_reset = _reset()
    AclSigner(ADMIN_AK, ADMIN_SK, legacy=True)(legacy_reset)
    assert "scheme 2" in checker.refusal(legacy_reset, HOST)
    v2_reset = _reset()
    AclSigner(ADMIN_AK, ADMIN_SK)(v2_reset)
    assert checker.refusal(v2_reset, HOST) is None
    strict = AclChecker(PlainAcl.from_text(PLAIN_ACL + "legacySignatures: false\n"))
    assert "legacySignatures: false" in strict.refusal(legacy_send, HOST)
    with pytest.raises(ConfigError, match="legacySignatures"):
        PlainAcl.from_text(PLAIN_ACL + "legacySignatures: maybe\n")


def test_change_me_keys_refuse_to_load():
    with pytest.raises(ConfigError, match="CHANGE-ME"):
        PlainAcl.from_file(str(REPO / "deploy" / "plain_acl.example.yml"))
    text = PLAIN_ACL.replace(USER_SK, "CHANGE-ME-please-1")
    with pytest.raises(ConfigError, match=r"accounts\[1\].*CHANGE-ME"):
        PlainAcl.from_text(text)


def test_get_broker_config_is_for_admins_only():
    checker = AclChecker(PlainAcl.from_text(PLAIN_ACL))
    for signer, refused in (
        (AclSigner(USER_AK, USER_SK), True),
        (AclSigner(ADMIN_AK, ADMIN_SK), False),
    ):
        req = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG, {})
        signer(req)
        reason = checker.refusal(req, HOST)
        assert (reason is not None) is refused, reason
        if refused:
            assert "needs an admin account" in reason
