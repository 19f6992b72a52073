"""The object store's interface: what every backend answers, and the keys it accepts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from contracts.errors import ArchiveError

DEFAULT_PART_SIZE = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(Protocol):
    root: str

    # ``sha256``: the caller's hex digest of ``data`` when it has one (saves hashing it again)
    def put(self, key: str, data: bytes, sha256: str | None = None) -> bool: ...
    def put_mutable(self, key: str, data: bytes) -> None: ...
    # at most ``max_bytes`` (default contracts.read_limits.MAX_OBJECT_BYTES): a larger object is
    # ObjectTooLargeError; only regular files are read (file://)
    def get(self, key: str, max_bytes: int | None = None) -> bytes: ...
    def get_range(self, key: str, start: int, end: int) -> bytes: ...
    # keys under ``prefix`` in key order; ``start_after``: only keys sorting after it (S3's
    # ListObjectsV2 ``StartAfter``), so a reader that keeps a watermark lists only what is new
    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]: ...
    # the distinct ``prefix + name + "/"`` one level below ``prefix`` (S3's CommonPrefixes with
    # delimiter "/"), sorted: discovers groups and nodes without listing their objects
    def list_prefixes(self, prefix: str) -> list[str]: ...

    # requests sent so far, by kind ("list" per page or directory read, "get", "put", ...),
    # and "keys_listed": the keys the listings returned
    requests: Counter

    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...

    # Conditional writes of a small mutable object (the audit's lease): each version has a
    # token (S3: its ETag; file://: the SHA-256 of its bytes). ``create`` writes only if the
    # key is absent (S3 ``If-None-Match: *``; file://: a hard link, which fails on an existing
    # name) and ``replace`` only if the key still holds the version ``token`` names (S3
    # ``If-Match``; file://: under an exclusive lock of the file); each returns the new token
    # or raises ``ConditionFailedError``. ``get_versioned``: (bytes, token).
    def create(self, key: str, data: bytes) -> str: ...
    def replace(self, key: str, data: bytes, token: str) -> str: ...
    def get_versioned(self, key: str) -> tuple[bytes, str]: ...


_WEB_TYPES = {
    ".html": "text/html; charset=utf-8", ".css": "text/css", ".js": "text/javascript",
    ".json": "application/json", ".svg": "image/svg+xml", ".png": "image/png",
    ".gif": "image/gif", ".ico": "image/x-icon", ".woff2": "font/woff2", ".ttf": "font/ttf",
    ".otf": "font/otf",
}  # fmt: skip


def web_type(key: str) -> str | None:
    dot = key.rfind(".")
    return _WEB_TYPES.get(key[dot:].lower()) if dot > key.rfind("/") else None


def check_key(key: str) -> str:
    if not key or key.startswith("/") or ".." in key.split("/"):
        raise ArchiveError(f"invalid object key {key!r}")
    return key
