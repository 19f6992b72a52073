"""Object storage behind one small interface: S3 (boto3: AWS, MinIO, moto's server) and file://.

Keys are relative to the ROOT (``s3://bucket/prefix`` or ``file:///path``); the archive layout
(``layout.py``) builds them. Immutable objects go through :meth:`put`, which never overwrites:
identical content is a no-op, different content an :class:`ArchiveConflictError`.

Credentials come from boto3's standard chain unless given; they never appear in a repr, a log
line or an error message.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar
from urllib.parse import urlparse

from contracts.errors import (
    ArchiveConflictError,
    ArchiveError,
    ObjectNotFoundError,
    TransientArchiveError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

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
    def get(self, key: str) -> bytes: ...
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


@dataclass(frozen=True)
class StoreSpec:
    """Everything needed to (re)open a store, picklable for Spark executors; no secret in repr."""

    root: str
    endpoint_url: str | None = None
    region: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    retries: int = 5
    part_size: int = DEFAULT_PART_SIZE
    session_token: str | None = field(default=None, repr=False)

    def open(self) -> ObjectStore:
        return open_store(
            self.root,
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key=self.access_key,
            secret_key=self.secret_key,
            retries=self.retries,
            part_size=self.part_size,
            session_token=self.session_token,
        )

    def resolved(self) -> StoreSpec:
        """This spec with what the driver's environment says filled in (endpoint, region and
        credentials from boto3's chain), so executors on other machines, whose environment
        lacks them, reach the same store. The spec travels pickled inside Spark tasks, never in
        Spark's configuration or environment: no secret reaches a log or the UI."""
        if urlparse(self.root).scheme != "s3" or self.access_key:
            return self
        import boto3

        region = self.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        creds = boto3.session.Session(region_name=region).get_credentials()
        frozen = creds.get_frozen_credentials() if creds is not None else None
        return replace(
            self,
            endpoint_url=self.endpoint_url
            or os.environ.get("HAPROOF_S3_ENDPOINT")
            or os.environ.get("AWS_ENDPOINT_URL"),
            region=region,
            access_key=frozen.access_key if frozen else None,
            secret_key=frozen.secret_key if frozen else None,
            session_token=frozen.token if frozen else None,
        )


def open_store(
    root: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    retries: int = 5,
    part_size: int = DEFAULT_PART_SIZE,
    session_token: str | None = None,
) -> ObjectStore:
    """Open ``s3://bucket[/prefix]`` or ``file:///path`` (a bare path means file://)."""
    parsed = urlparse(root)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ArchiveError(f"archive root {root!r} names no bucket (s3://bucket/prefix)")
        return S3ObjectStore(
            root,
            parsed.netloc,
            parsed.path.strip("/"),
            endpoint_url=endpoint_url
            or os.environ.get("HAPROOF_S3_ENDPOINT")
            or os.environ.get("AWS_ENDPOINT_URL"),
            region=region,
            access_key=access_key,
            secret_key=secret_key,
            retries=retries,
            part_size=part_size,
            session_token=session_token,
        )
    if parsed.scheme in ("file", ""):
        path = parsed.path if parsed.scheme == "file" else root
        if not path:
            raise ArchiveError(f"archive root {root!r} names no directory")
        return FileObjectStore(f"file://{os.path.abspath(path)}", os.path.abspath(path))
    raise ArchiveError(f"archive root {root!r}: unsupported scheme {parsed.scheme!r} (s3, file)")


_WEB_TYPES = {
    ".html": "text/html; charset=utf-8", ".css": "text/css", ".js": "text/javascript",
    ".json": "application/json", ".svg": "image/svg+xml", ".png": "image/png",
    ".gif": "image/gif", ".ico": "image/x-icon", ".woff2": "font/woff2", ".ttf": "font/ttf",
    ".otf": "font/otf",
}  # fmt: skip


def _web_type(key: str) -> str | None:
    dot = key.rfind(".")
    return _WEB_TYPES.get(key[dot:].lower()) if dot > key.rfind("/") else None


def _check_key(key: str) -> str:
    if not key or key.startswith("/") or ".." in key.split("/"):
        raise ArchiveError(f"invalid object key {key!r}")
    return key


class FileObjectStore:
    """``file://`` backend: a key is a path under the root; writes are temp + fsync + rename."""

    def __init__(self, root: str, path: str):
        self.root = root
        self.path = path
        self.requests: Counter = Counter()

    def _p(self, key: str) -> str:
        return os.path.join(self.path, _check_key(key))

    def _write(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise ArchiveError(f"cannot write {path}: {exc.strerror}") from exc

    def put(self, key: str, data: bytes, sha256: str | None = None) -> bool:
        self.requests["put"] += 1
        path = self._p(key)
        if os.path.exists(path):
            if self.get(key) == data:
                return False
            raise ArchiveConflictError(f"{self.root}/{key} already holds different content")
        self._write(path, data)
        return True

    def put_mutable(self, key: str, data: bytes) -> None:
        self.requests["put"] += 1
        self._write(self._p(key), data)

    def get(self, key: str) -> bytes:
        self.requests["get"] += 1
        try:
            with open(self._p(key), "rb") as fh:
                return fh.read()
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"{self.root}/{key} does not exist") from exc
        except OSError as exc:
            raise ArchiveError(f"cannot read {self.root}/{key}: {exc.strerror}") from exc

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self.requests["get"] += 1
        try:
            with open(self._p(key), "rb") as fh:
                fh.seek(start)
                return fh.read(max(0, end - start))
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"{self.root}/{key} does not exist") from exc
        except OSError as exc:
            raise ArchiveError(f"cannot read {self.root}/{key}: {exc.strerror}") from exc

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Keys under ``prefix`` after ``start_after``, sorted. Directories whose keys all sort
        at or before ``start_after`` are not entered; a directory that is entered is read with
        one ``listdir`` (names only: only the keys returned are stat'ed)."""
        after = start_after or ""
        found: list[str] = []
        self._collect(prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else "", prefix, after, found)
        found.sort()
        for key in found:
            try:
                size = os.path.getsize(os.path.join(self.path, key))
            except FileNotFoundError:
                continue  # deleted since the directory was read (a prune)
            self.requests["keys_listed"] += 1
            yield ObjectInfo(key, size)

    def _collect(self, rel: str, prefix: str, after: str, found: list[str]) -> None:
        """Keys under directory ``rel`` (``""`` or ending in "/") into ``found``."""
        try:
            self.requests["list"] += 1
            names = os.listdir(os.path.join(self.path, rel) if rel else self.path)
        except (FileNotFoundError, NotADirectoryError):
            return
        if after.startswith(rel):
            # by name alone (a directory of a year of chunks is mostly names at or before
            # ``after``): a name that could be a directory of keys after ``after`` (its
            # ``name/`` sorts after it, or holds it) stays; files are compared below
            tail = after[len(rel) :]
            names = [n for n in names if n + "/" > tail or tail.startswith(n + "/")]
        elif after > rel:
            return  # every key below ``rel`` sorts before ``after``
        deep = rel.startswith(prefix)  # every key below ``rel`` is under ``prefix``
        for name in names:
            key = rel + name
            if ".tmp-" in name:
                continue  # a write in progress (or killed): not an object
            if not deep and not (key.startswith(prefix) or prefix.startswith(key + "/")):
                continue
            if os.path.isdir(os.path.join(self.path, key)):
                self._collect(key + "/", prefix, after, found)
            elif key > after and key.startswith(prefix):
                found.append(key)

    def list_prefixes(self, prefix: str) -> list[str]:
        rel, _, partial = prefix.rpartition("/")
        rel = rel + "/" if rel else ""
        self.requests["list"] += 1
        try:
            names = os.listdir(os.path.join(self.path, rel) if rel else self.path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(
            f"{rel}{n}/"
            for n in names
            if n.startswith(partial) and os.path.isdir(os.path.join(self.path, rel + n))
        )

    def exists(self, key: str) -> bool:
        return os.path.exists(self._p(key))

    def delete(self, key: str) -> None:
        self.requests["delete"] += 1
        try:
            os.unlink(self._p(key))
        except FileNotFoundError:
            pass


class _KeyExists(ArchiveError):
    """A conditional put found the key taken (HTTP 412)."""


_PERMANENT = {
    "NoSuchBucket": "bucket {bucket} does not exist",
    "AccessDenied": "access denied to {bucket}",
    "InvalidAccessKeyId": "the access key is not valid for {bucket}",
    "SignatureDoesNotMatch": "the secret key does not match for {bucket}",
    "AllAccessDisabled": "access to {bucket} is disabled",
}


# 4xx answers worth sending again; BadDigest: the server got other bytes than the checksum says
_TRANSIENT = ("SlowDown", "RequestTimeout", "ConditionalRequestConflict", "BadDigest")


def _is_loopback(endpoint_url: str | None) -> bool:
    host = urlparse(endpoint_url).hostname if endpoint_url else None
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class S3ObjectStore:
    """S3 backend over boto3; bounded retries with backoff and jitter on transient errors."""

    def __init__(
        self,
        root: str,
        bucket: str,
        prefix: str,
        *,
        endpoint_url: str | None,
        region: str | None,
        access_key: str | None,
        secret_key: str | None,
        retries: int,
        part_size: int,
        sleep: Callable[[float], None] = time.sleep,
        session_token: str | None = None,
    ):
        import boto3
        from botocore.config import Config

        self.root = root
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self.endpoint_url = endpoint_url
        self.retries = retries
        self.part_size = max(5 * 1024 * 1024, part_size)
        self._sleep = sleep
        self.requests: Counter = Counter()
        self._if_none_match: bool | None = None  # does the server honour If-None-Match: *?
        loopback = _is_loopback(endpoint_url)
        session = boto3.session.Session(
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            aws_session_token=session_token,
            region_name=region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        )
        self._client = session.client(
            "s3",
            endpoint_url=endpoint_url,
            config=Config(
                retries={"max_attempts": 1, "mode": "standard"},
                connect_timeout=5,
                read_timeout=60,
                s3={
                    "addressing_style": "path",
                    # botocore signs an S3 body's SHA-256 over plain HTTP, not over HTTPS (TLS
                    # and the checksum header guard it there). On loopback (the embedded
                    # server) no one is on the path either: a hash pass over every chunk saved
                    **({"payload_signing_enabled": False} if loopback else {}),
                },
                # Single PUTs carry the SHA-256 the manifest records (``x-amz-checksum-sha256``,
                # which AWS S3 and MinIO verify), so botocore's own CRC32 pass is only for parts,
                # and on loopback not even there: no wire to guard, and the sha256 in each
                # manifest, checked by the audit, covers the bytes end to end.
                **({"request_checksum_calculation": "when_required"} if loopback else {}),
            ),
        )

        # an S3-compatible store that refuses checksum headers is configured with botocore's
        # own switch (AWS_REQUEST_CHECKSUM_CALCULATION=when_required): the SHA-256 stays off too
        self._sha256_header = (
            loopback or self._client.meta.config.request_checksum_calculation != "when_required"
        )

        # botocore wraps a bytes body in a BytesIO, which urllib3 then sends 16 KiB at a time:
        # thousands of send() calls per chunk, each taking the GIL back from the broker's event
        # loop. Kept as bytes, a body goes out in one sendall.
        from botocore.handlers import convert_body_to_file_like_object

        for op in ("PutObject", "UploadPart"):
            self._client.meta.events.unregister(
                f"before-parameter-build.s3.{op}", convert_body_to_file_like_object
            )

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.root!r}, endpoint={self.endpoint_url!r})"

    def _k(self, key: str) -> str:
        return self.prefix + _check_key(key)

    def _call(self, what: str, key: str, fn: Callable[[], T]) -> T:
        from botocore.exceptions import BotoCoreError, ClientError

        where = f"{self.root}/{key}" if key else self.root
        self.requests[what.split()[0]] += 1
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code in ("NoSuchKey", "404", "NotFound"):
                    raise ObjectNotFoundError(f"{where} does not exist") from None
                if code == "PreconditionFailed" or status == 412:
                    raise _KeyExists(f"{where} exists") from None
                if code in _PERMANENT:
                    raise ArchiveError(
                        f"{what} {where}: " + _PERMANENT[code].format(bucket=self.bucket)
                    ) from None
                if status and status < 500 and code not in _TRANSIENT:
                    raise ArchiveError(f"{what} {where} failed: {code} (HTTP {status})") from None
                reason = f"{code} (HTTP {status})"
            except BotoCoreError as exc:
                reason = type(exc).__name__
            if attempt < self.retries:
                delay = min(5.0, 0.1 * (2**attempt)) * (0.5 + random.random())
                log.warning("%s %s: %s; retry %d in %.2fs", what, where, reason, attempt + 1, delay)
                self._sleep(delay)
        raise TransientArchiveError(
            f"{what} {where} failed after {self.retries + 1} attempts: {reason}"
            + (f" (endpoint {self.endpoint_url})" if self.endpoint_url else "")
        )

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return self._call(
                "head", key, lambda: self._client.head_object(Bucket=self.bucket, Key=self._k(key))
            )
        except ObjectNotFoundError:
            return None

    def put(self, key: str, data: bytes, sha256: str | None = None) -> bool:
        """Write ``key`` once. Where the server honours ``If-None-Match: *`` (AWS S3, MinIO,
        moto; probed once) that is one conditional request, and only a refused one looks at what
        the key holds; elsewhere a HEAD comes first (a concurrent writer could slip in between)."""
        digest = sha256 or hashlib.sha256(data).hexdigest()
        if self._conditional_puts():
            try:
                self._upload(key, data, digest, if_absent=True)
                return True
            except _KeyExists:
                head = self._head(key)
                if head is None:  # gone again (deleted between): write it
                    return self.put(key, data, digest)
                return self._same_or_conflict(key, head, digest)
        head = self._head(key)
        if head is not None:
            return self._same_or_conflict(key, head, digest)
        self._upload(key, data, digest)
        return True

    def _same_or_conflict(self, key: str, head: dict[str, Any], digest: str) -> bool:
        existing = head.get("Metadata", {}).get("sha256")
        if existing is None:
            existing = hashlib.sha256(self.get(key)).hexdigest()
        if existing == digest:
            return False
        raise ArchiveConflictError(f"{self.root}/{key} already holds different content")

    def _conditional_puts(self) -> bool:
        """Does the server refuse a second ``If-None-Match: *`` PUT of a key? Asked once per
        store with a probe key outside the archive layout (deleted after); a server that ignores
        the header would overwrite, so the answer decides whether puts check with a HEAD."""
        if self._if_none_match is None:
            probe = f"_haproof/conditional-put-probe/{os.getpid()}-{random.getrandbits(64):016x}"
            body, digest = b"probe", hashlib.sha256(b"probe").hexdigest()
            self._upload(probe, body, digest, if_absent=True)
            try:
                self._upload(probe, body, digest, if_absent=True)
                self._if_none_match = False
                log.info("%s: the server ignores If-None-Match; puts check with HEAD", self.root)
            except _KeyExists:
                self._if_none_match = True
            try:
                self.delete(probe)
            except ArchiveError as exc:
                log.warning("%s: could not delete the probe object %s: %s", self.root, probe, exc)
        return self._if_none_match

    def put_mutable(self, key: str, data: bytes) -> None:
        self._upload(key, data, hashlib.sha256(data).hexdigest())

    def _upload(self, key: str, data: bytes, digest: str, if_absent: bool = False) -> None:
        """PUT (multipart above the part size); ``if_absent``: raise :class:`_KeyExists` when
        the key exists (the server answers 412 to ``If-None-Match: *``)."""
        k = self._k(key)
        meta = {"sha256": digest}
        cond = {"IfNoneMatch": "*"} if if_absent else {}
        # pages, stylesheets, scripts, fonts and images (reports, Data Docs) open in a browser
        # straight from the bucket only with their media type; everything else stays untyped
        web_type = _web_type(key)
        typed = {"ContentType": web_type} if web_type else {}
        if len(data) <= self.part_size:
            self._call(
                "put",
                key,
                lambda: self._client.put_object(
                    Bucket=self.bucket,
                    Key=k,
                    Body=data,
                    Metadata=meta,
                    **cond,
                    **typed,
                    **self._checksum(digest),
                ),
            )
            return
        # multipart: nothing is visible under the key until CompleteMultipartUpload
        up = self._call(
            "create multipart",
            key,
            lambda: self._client.create_multipart_upload(
                Bucket=self.bucket, Key=k, Metadata=meta, **typed
            ),
        )
        upload_id = up["UploadId"]
        try:
            parts = []
            for n, pos in enumerate(range(0, len(data), self.part_size), 1):
                body = data[pos : pos + self.part_size]
                res = self._call(
                    f"upload part {n}",
                    key,
                    lambda body=body, n=n: self._client.upload_part(
                        Bucket=self.bucket, Key=k, UploadId=upload_id, PartNumber=n, Body=body
                    ),
                )
                parts.append({"PartNumber": n, "ETag": res["ETag"]})
            self._call(
                "complete multipart",
                key,
                lambda: self._client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=k,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    **cond,
                ),
            )
        except BaseException:
            try:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=k, UploadId=upload_id)
            except Exception:  # best effort: the bucket's lifecycle rule cleans up leftovers
                log.warning("could not abort multipart upload of %s/%s", self.root, key)
            raise

    def _checksum(self, digest: str) -> dict[str, str]:
        if not self._sha256_header:
            return {}
        return {"ChecksumSHA256": base64.b64encode(bytes.fromhex(digest)).decode("ascii")}

    def get(self, key: str) -> bytes:
        return self._call(
            "get",
            key,
            lambda: self._client.get_object(Bucket=self.bucket, Key=self._k(key))["Body"].read(),
        )

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        return self._call(
            "get range",
            key,
            lambda: self._client.get_object(
                Bucket=self.bucket, Key=self._k(key), Range=f"bytes={start}-{end - 1}"
            )["Body"].read(),
        )

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        for page in self._pages(prefix, start_after=start_after):
            for obj in page.get("Contents", []):
                self.requests["keys_listed"] += 1
                yield ObjectInfo(obj["Key"][len(self.prefix) :], obj["Size"])

    def list_prefixes(self, prefix: str) -> list[str]:
        out = []
        for page in self._pages(prefix, delimiter="/"):
            out += [p["Prefix"][len(self.prefix) :] for p in page.get("CommonPrefixes", [])]
        return sorted(out)

    def _pages(self, prefix: str, **opts: str | None) -> Iterator[dict[str, Any]]:
        """ListObjectsV2 pages (1,000 keys each) under ``prefix``; ``start_after``, ``delimiter``."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
        if opts.get("start_after"):
            kwargs["StartAfter"] = self.prefix + _check_key(str(opts["start_after"]))
        if opts.get("delimiter"):
            kwargs["Delimiter"] = opts["delimiter"]
        while True:
            page = self._call(
                "list", prefix, lambda kw=dict(kwargs): self._client.list_objects_v2(**kw)
            )
            yield page
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page.get("NextContinuationToken")

    def exists(self, key: str) -> bool:
        return self._head(key) is not None

    def delete(self, key: str) -> None:
        self._call(
            "delete", key, lambda: self._client.delete_object(Bucket=self.bucket, Key=self._k(key))
        )
