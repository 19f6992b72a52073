"""Request signatures: RocketMQ's plain ACL scheme (AclClientRPCHook / AclUtils, what the Java
client and ali-ons send) and haproof's request-bound scheme 2 (what our own clients, admin tool
and brokers send), and the checking side of both.

Scheme 2 (``SignatureVersion: 2``) signs HMAC-SHA256 over a canonical encoding that cannot be
read two ways: a purpose ("haproof-remoting-v2"), the request code, every field as
length-prefixed key and value (so ``{a: "12"}`` and ``{a: "1", b: "2"}`` differ), and the
body's SHA-256; ``SignTimestamp`` (ms) and ``SignNonce`` are among the signed fields, so the
checker holds it to a time window and refuses a nonce it has seen (broker/acl/replay.py). The HA
handshake signs with its own purpose and the master's nonce (``sign_ha_handshake``): no
signature of one kind is ever valid as another.

The RocketMQ scheme, kept for RocketMQ's clients:

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
import secrets
import time
from collections.abc import Mapping

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # RocketMQ MixAll: not signed
_UNSIGNED = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})
SIGNATURE_VERSION = "SignatureVersion"
SIGN_TIMESTAMP = "SignTimestamp"
SIGN_NONCE = "SignNonce"
V2 = "2"
REMOTING_PURPOSE = "haproof-remoting-v2"
HA_PURPOSE = "haproof-ha-handshake-v2"


def _enc(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def canonical_content(purpose: str, code: int, fields: Mapping[str, str], body: bytes | None):
    """Scheme 2's signed bytes: purpose, code, length-prefixed sorted keys and values (no
    Signature), the body's SHA-256."""
    parts = [_enc(purpose), b"\n%d\n" % code]
    for key in sorted(fields):
        if key == SIGNATURE:
            continue
        k, v = _enc(key), _enc(str(fields[key]))
        parts.append(b"%d:%s%d:%s\n" % (len(k), k, len(v), v))
    parts.append(hashlib.sha256(body or b"").digest())
    return b"".join(parts)


def calc_signature_v2(content: bytes, secret_key: str) -> str:
    digest = hmac.new(_enc(secret_key), content, hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def signature_v2_matches(
    purpose: str, code: int, fields: Mapping[str, str], body: bytes | None, secret_key: str
) -> bool:
    """Whether ``fields['Signature']`` is scheme 2's signature of this request (constant-time)."""
    given = fields.get(SIGNATURE)
    if not given:
        return False
    try:
        expected = calc_signature_v2(canonical_content(purpose, code, fields, body), secret_key)
    except (TypeError, ValueError):
        return False
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


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
    """``signer(request)`` signs a RemotingCommand in place before it is sent (RocketMQ's
    AclClientRPCHook): scheme 2, or RocketMQ's scheme with ``legacy=True`` (what RocketMQ's own
    clients send). Made from an account's keys (``accessKey`` / ``secretKey``)."""

    def __init__(
        self,
        access_key: str,
        secret_key: str,
        security_token: str | None = None,
        legacy: bool = False,
        clock_ms=wall_ms,
    ):
        if not access_key or not secret_key:
            raise ValueError("an ACL signer needs both an access key and a secret key")
        self.access_key = access_key
        self._secret_key = secret_key
        self.security_token = security_token
        self.legacy = legacy
        self.clock_ms = clock_ms

    def __repr__(self) -> str:  # never the secret
        return f"AclSigner(access_key={self.access_key!r})"

    def _identify(self, fields: dict[str, str]) -> None:
        for key in (SIGNATURE, SIGNATURE_VERSION, SIGN_TIMESTAMP, SIGN_NONCE):
            fields.pop(key, None)
        fields[ACCESS_KEY] = self.access_key
        if self.security_token:
            fields[SECURITY_TOKEN] = self.security_token

    def sign_fields(self, fields: dict[str, str], body: bytes | None) -> None:
        """RocketMQ's scheme (values only, no time, no nonce)."""
        self._identify(fields)
        fields[SIGNATURE] = calc_signature(signed_content(fields, body), self._secret_key)

    def sign_v2(
        self, code: int, fields: dict[str, str], body: bytes | None, purpose: str, nonce=None
    ) -> None:
        self._identify(fields)
        fields[SIGNATURE_VERSION] = V2
        fields[SIGN_TIMESTAMP] = str(self.clock_ms())
        fields[SIGN_NONCE] = nonce or secrets.token_hex(16)
        content = canonical_content(purpose, code, fields, body)
        fields[SIGNATURE] = calc_signature_v2(content, self._secret_key)

    def sign_ha_handshake(self, fields: dict[str, str], master_nonce: str) -> None:
        """The HA handshake: its own purpose, the nonce the master chose for this connection."""
        self.sign_v2(0, fields, None, HA_PURPOSE, nonce=master_nonce)

    def __call__(self, request) -> None:
        if self.legacy:
            self.sign_fields(request.ext_fields, request.body)
        else:
            self.sign_v2(request.code, request.ext_fields, request.body, REMOTING_PURPOSE)
