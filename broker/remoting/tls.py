"""TLS for remoting, with the standard library's ssl, modes as RocketMQ's ``tlsMode``:

- ``disabled``: plain TCP only;
- ``permissive``: plain and TLS on the same port -- the first byte a client sends tells them
  apart (0x16 opens a TLS handshake record; a remoting frame starts with its length's high
  byte, 0 for any frame under 16 MiB);
- ``enforcing``: TLS only; a plain client's bytes fail the handshake and it is closed.

Broker keys (broker.conf): ``tlsMode``, ``tlsServerCertPath``, ``tlsServerKeyPath``,
``tlsServerKeyPassword`` (or ``tlsServerKeyPasswordFile``, or ``$HAPROOF_TLS_KEY_PASSWORD``:
an encrypted key never prompts on the terminal); for the node's own outgoing connections
``tlsEnable`` and
``tlsClientTrustCertPath`` (the CA or certificate to verify servers with; without it the
system's trust store). Name server: ``--tls-mode``, ``--tls-cert``, ``--tls-key``,
``--tls-key-password-file``.
"""

from __future__ import annotations

import enum
import os
import ssl

from contracts.errors import ConfigError

TLS_RECORD_HANDSHAKE = 0x16


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"

    @classmethod
    def parse(cls, text: str) -> TlsMode:
        try:
            return cls(str(text).strip().lower())
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ConfigError(f"tlsMode={text!r}: expected one of {names}") from None


KEY_PASSWORD_ENV = "HAPROOF_TLS_KEY_PASSWORD"
_PASSWORD_FILE_MAX_BYTES = 4096


def key_password(inline: str | None = None, path: str | None = None) -> str | None:
    """The TLS key's pass phrase: ``inline`` (tlsServerKeyPassword), else the first line of the
    file at ``path`` (tlsServerKeyPasswordFile / --tls-key-password-file), else the variable
    ``HAPROOF_TLS_KEY_PASSWORD``; None when none is set. Never a prompt on the terminal."""
    if inline:
        return inline
    if path:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(_PASSWORD_FILE_MAX_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read the TLS key pass phrase file {path}: {exc}") from exc
        if len(raw) > _PASSWORD_FILE_MAX_BYTES:
            raise ConfigError(f"{path}: a pass phrase file of more than 4096 bytes")
        return raw.decode("utf-8", "replace").splitlines()[0] if raw.strip() else ""
    return os.environ.get(KEY_PASSWORD_ENV) or None


def server_context(cert_path: str | None, key_path: str | None,
                   password: str | None = None) -> ssl.SSLContext:  # fmt: skip
    """A server context from a PEM certificate (chain) and key; ConfigError names what is
    missing or unreadable. An encrypted key without a pass phrase is a ConfigError, never a
    prompt on the terminal."""
    if not cert_path or not key_path:
        raise ConfigError(
            "TLS needs a certificate and a key (tlsServerCertPath and tlsServerKeyPath, "
            "or --tls-cert and --tls-key)"
        )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    asked: list[bool] = []

    def pass_phrase() -> bytes:  # called by OpenSSL only for an encrypted key
        asked.append(True)
        return (password or "").encode("utf-8")

    try:
        ctx.load_cert_chain(cert_path, key_path, password=pass_phrase)
    except (OSError, ssl.SSLError) as exc:
        hint = ""
        if asked and not password:
            hint = (
                f" (the key is encrypted: give its pass phrase with tlsServerKeyPasswordFile, "
                f"--tls-key-password-file or ${KEY_PASSWORD_ENV})"
            )
        raise ConfigError(
            f"cannot load TLS certificate {cert_path} with key {key_path}: {exc}{hint}"
        ) from exc
    return ctx


def client_context(trust_cert_path: str | None = None) -> ssl.SSLContext:
    """A client context verifying the server against ``trust_cert_path`` (a PEM CA bundle or
    the server's own certificate), or the system's trust store when None."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if trust_cert_path:
        try:
            ctx.load_verify_locations(cafile=trust_cert_path)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot load TLS trust certificate {trust_cert_path}: {exc}"
            ) from exc
    return ctx
