"""The request signature of RocketMQ's plain ACL (AclClientRPCHook / AclUtils), shared by every
client that signs (ours, the Java client, ali-ons) and the checking side.

A signer adds ``AccessKey`` (and ``SecurityToken`` when it has one) to the request's extFields,
then signs: the extFields' values, ordered by key and without ``Signature``, concatenated as one
UTF-8 string, followed by the raw body bytes; HMAC-SHA1 with the secret key, base64. The result
travels as extField ``Signature``. The checker recomputes it from the extFields it received, so
whatever fields a client adds (ali-ons adds ``OnsChannel``) are covered as long as they are
sent. RocketMQ leaves out ``_UNIQUE_KEY_QUERY`` on the checking side; so do we.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # RocketMQ MixAll: not signed
_UNSIGNED = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})


def signed_content(fields: Mapping[str, str], body: bytes | None) -> bytes:
    """What the signature covers: values ordered by key (no Signature), then the body."""
    text = "".join(fields[k] for k in sorted(fields) if k not in _UNSIGNED)
    return text.encode("utf-8") + (body or b"")


def calc_signature(content: bytes, secret_key: str) -> str:
    """RocketMQ AclUtils.calSignature: base64(HMAC-SHA1(secretKey, content))."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signature_matches(fields: Mapping[str, str], body: bytes | None, secret_key: str) -> bool:
    """Whether ``fields['Signature']`` is the signature of this request (constant-time)."""
    given = fields.get(SIGNATURE)
    if not given:
        return False
    expected = calc_signature(signed_content(fields, body), secret_key)
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


class AclSigner:
    """RocketMQ's AclClientRPCHook: ``signer(request)`` signs a RemotingCommand in place before it
    is sent. Made from an account's keys (``accessKey`` / ``secretKey``)."""

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None):
        if not access_key or not secret_key:
            raise ValueError("an ACL signer needs both an access key and a secret key")
        self.access_key = access_key
        self._secret_key = secret_key
        self.security_token = security_token

    def __repr__(self) -> str:  # never the secret
        return f"AclSigner(access_key={self.access_key!r})"

    def sign_fields(self, fields: dict[str, str], body: bytes | None) -> None:
        fields.pop(SIGNATURE, None)
        fields[ACCESS_KEY] = self.access_key
        if self.security_token:
            fields[SECURITY_TOKEN] = self.security_token
        fields[SIGNATURE] = calc_signature(signed_content(fields, body), self._secret_key)

    def __call__(self, request) -> None:
        self.sign_fields(request.ext_fields, request.body)
