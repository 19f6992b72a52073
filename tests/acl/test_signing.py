"""The plain ACL request signature: one hand-checked vector, ali-ons' own signing code agreeing
with ours byte for byte, and a property: any change to a signed field or the body breaks it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.acl.signing import (
    HA_PURPOSE,
    REMOTING_PURPOSE,
    AclSigner,
    calc_signature,
    canonical_content,
    signature_matches,
    signature_v2_matches,
    signed_content,
)
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand

JS_DIR = Path(__file__).resolve().parent.parent / "interop" / "js"


def test_content_is_sorted_values_then_body_without_signature():
    fields = {"b": "2", "a": "1", "Signature": "x", "AccessKey": "ak", "_UNIQUE_KEY_QUERY": "u"}
    # sorted keys: AccessKey, a, b ("A" < "a"); Signature and _UNIQUE_KEY_QUERY left out
    assert signed_content(fields, b"BODY") == b"ak12BODY"
    assert signed_content(fields, None) == b"ak12"


def test_signature_is_base64_hmac_sha1():
    expected = base64.b64encode(hmac.new(b"secret12", b"ak12BODY", hashlib.sha1).digest())
    assert calc_signature(b"ak12BODY", "secret12") == expected.decode()


def test_signer_adds_access_key_and_signature_the_checker_accepts():
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T", "queueId": 1}, b"b")
    AclSigner("haproofAK", "haproofSK", legacy=True)(req)
    assert req.ext_fields["AccessKey"] == "haproofAK"
    assert signature_matches(req.ext_fields, req.body, "haproofSK")
    assert not signature_matches(req.ext_fields, req.body, "haproofSK2")
    req.ext_fields["queueId"] = "2"
    assert not signature_matches(req.ext_fields, req.body, "haproofSK")


def test_security_token_is_signed_too():
    req = RemotingCommand.request(RequestCode.HEART_BEAT, {})
    AclSigner("haproofAK", "haproofSK", security_token="tok", legacy=True)(req)
    assert req.ext_fields["SecurityToken"] == "tok"
    assert signature_matches(req.ext_fields, req.body, "haproofSK")
    req.ext_fields["SecurityToken"] = "other"
    assert not signature_matches(req.ext_fields, req.body, "haproofSK")


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_fields = st.dictionaries(
    st.text(alphabet="abcdefgXYZ_", min_size=1, max_size=8).filter(
        lambda k: k not in ("Signature", "AccessKey", "_UNIQUE_KEY_QUERY")
    ),
    _text,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(fields=_fields, body=st.binary(max_size=64), data=st.data())
def test_any_change_to_a_field_or_the_body_breaks_the_signature(fields, body, data):
    signed = dict(fields)
    AclSigner("haproofAK", "haproofSK").sign_fields(signed, body)
    assert signature_matches(signed, body, "haproofSK")
    if fields:
        key = data.draw(st.sampled_from(sorted(fields)))
        tampered = dict(signed)
        tampered[key] = signed[key] + "x"
        assert not signature_matches(tampered, body, "haproofSK")
    assert not signature_matches(signed, body + b"x", "haproofSK")


_ALI_ONS_SIGN = r"""
const Channel = require('ali-ons/lib/channel');
const RemotingCommand = require('ali-ons/lib/protocol/command/remoting_command');
const input = JSON.parse(process.argv[1]);
const ch = Object.create(Channel.prototype);
ch.options = { accessKey: input.ak, secretKey: input.sk };
const cmd = RemotingCommand.createRequestCommand(input.code, input.header);
if (input.body) cmd.body = Buffer.from(input.body, 'base64');
ch.beforeRequest(cmd);
cmd.makeCustomHeaderToNet();
process.stdout.write(JSON.stringify(cmd.extFields));
"""


def test_ali_ons_signature_verifies_with_our_checker():
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "ali-ons").is_dir():
        pytest.skip("node or ali-ons not installed (scripts/bootstrap)")
    body = b"hello \x00\xff body"
    header = {"consumerGroup": "CG_x", "topic": "T_1", "queueId": 3, "commitOffset": 12}
    arg = {
        "ak": "aliAccessKey",
        "sk": "aliSecretKey",
        "code": int(RequestCode.UPDATE_CONSUMER_OFFSET),
        "header": header,
        "body": base64.b64encode(body).decode(),
    }
    out = subprocess.run(
        [node, "-e", _ALI_ONS_SIGN, json.dumps(arg)],
        cwd=JS_DIR,
        capture_output=True,
        timeout=60,
        check=True,
    )
    ext = {k: str(v) for k, v in json.loads(out.stdout).items()}
    assert ext["AccessKey"] == "aliAccessKey" and ext["OnsChannel"] == "ALIYUN"
    assert signature_matches(ext, body, "aliSecretKey")
    assert not signature_matches(ext, body, "wrongSecret")
    # and ours, over the same fields, is the same string
    ours = dict(ext)
    AclSigner("aliAccessKey", "aliSecretKey").sign_fields(ours, body)
    assert ours["Signature"] == ext["Signature"]


def test_scheme_2_binds_keys_values_code_and_body():
    # RocketMQ's scheme cannot tell these apart; scheme 2 can
    assert signed_content({"a": "12"}, None) == signed_content({"a": "1", "b": "2"}, None)
    one = canonical_content(REMOTING_PURPOSE, 10, {"a": "12"}, None)
    assert one != canonical_content(REMOTING_PURPOSE, 10, {"a": "1", "b": "2"}, None)
    assert one != canonical_content(REMOTING_PURPOSE, 11, {"a": "12"}, None)
    assert one != canonical_content(HA_PURPOSE, 10, {"a": "12"}, None)
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}, b"b")
    AclSigner("haproofAK", "haproofSK")(req)
    f = req.ext_fields
    assert f["SignatureVersion"] == "2" and f["SignTimestamp"] and len(f["SignNonce"]) == 32
    assert signature_v2_matches(REMOTING_PURPOSE, req.code, f, req.body, "haproofSK")
    assert not signature_v2_matches(REMOTING_PURPOSE, 1008, f, req.body, "haproofSK")
    assert not signature_v2_matches(HA_PURPOSE, req.code, f, req.body, "haproofSK")
    assert not signature_matches(f, req.body, "haproofSK")  # never valid as the old scheme


@settings(max_examples=200, deadline=None)
@given(fields=_fields, body=st.binary(max_size=64), data=st.data())
def test_scheme_2_any_change_to_a_key_a_value_or_the_body_breaks_it(fields, body, data):
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE, dict(fields), body)
    AclSigner("haproofAK", "haproofSK")(req)
    signed = req.ext_fields
    assert signature_v2_matches(REMOTING_PURPOSE, req.code, signed, body, "haproofSK")
    key = data.draw(st.sampled_from(sorted(signed)))
    if key != "Signature":
        renamed = dict(signed)
        renamed[key + "x"] = renamed.pop(key)
        assert not signature_v2_matches(REMOTING_PURPOSE, req.code, renamed, body, "haproofSK")
        tampered = dict(signed)
        tampered[key] = signed[key] + "x"
        assert not signature_v2_matches(REMOTING_PURPOSE, req.code, tampered, body, "haproofSK")
    added = {**signed, "extra": ""}
    assert not signature_v2_matches(REMOTING_PURPOSE, req.code, added, body, "haproofSK")
    assert not signature_v2_matches(REMOTING_PURPOSE, req.code, signed, body + b"x", "haproofSK")
