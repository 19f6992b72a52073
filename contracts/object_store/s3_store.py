"""The S3 backend over boto3 (AWS, MinIO, the embedded moto server)."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from contracts.errors import (
    ArchiveConflictError,
    ArchiveError,
    ConditionFailedError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    TransientArchiveError,
)
from contracts.object_store.interface import ObjectInfo, check_key, web_type
from contracts.object_store.s3_errors import (
    NO_CREDENTIALS,
    PERMANENT,
    TRANSIENT,
    KeyExists,
    is_loopback,
)
from contracts.read_limits import MAX_OBJECT_BYTES

log = logging.getLogger(__name__)
T = TypeVar("T")


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
        loopback = is_loopback(endpoint_url)
        session = boto3.session.Session(
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            aws_session_token=session_token,
            region_name=region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        )
        self._session = session  # presigned links get a client of their own (SigV4)
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
        return self.prefix + check_key(key)

    def _call(self, what: str, key: str, fn: Callable[[], T]) -> T:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

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
                    raise KeyExists(f"{where} exists") from None
                if code in PERMANENT:
                    raise ArchiveError(
                        f"{what} {where}: " + PERMANENT[code].format(bucket=self.bucket)
                    ) from None
                if status and status < 500 and code not in TRANSIENT:
                    raise ArchiveError(f"{what} {where} failed: {code} (HTTP {status})") from None
                reason = f"{code} (HTTP {status})"
            except NoCredentialsError:
                raise ArchiveError(f"{what} {where}: {NO_CREDENTIALS}") from None
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
            except KeyExists:
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
            except KeyExists:
                self._if_none_match = True
            try:
                self.delete(probe)
            except ArchiveError as exc:
                log.warning("%s: could not delete the probe object %s: %s", self.root, probe, exc)
        return self._if_none_match

    def put_mutable(self, key: str, data: bytes) -> None:
        self._upload(key, data, hashlib.sha256(data).hexdigest())

    def create(self, key: str, data: bytes) -> str:
        """Write ``key`` only if absent (``If-None-Match: *``); its ETag (interface)."""
        self._require_conditions()
        res = self._op("put", "put_object", key, Body=data, IfNoneMatch="*")
        return str(res["ETag"])

    def replace(self, key: str, data: bytes, token: str) -> str:
        """Write ``key`` only if its ETag is still ``token`` (``If-Match``); its new ETag."""
        self._require_conditions()
        try:
            res = self._op("put", "put_object", key, Body=data, IfMatch=token)
        except ObjectNotFoundError as exc:  # gone since it was read
            raise ConditionFailedError(f"{self.root}/{key} is gone") from exc
        return str(res["ETag"])

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        def read() -> tuple[bytes, str]:
            res = self._client.get_object(Bucket=self.bucket, Key=self._k(key))
            return res["Body"].read(), str(res["ETag"])

        return self._call("get", key, read)

    def _require_conditions(self) -> None:
        """Conditional writes are what a lease rests on: a server that ignores
        ``If-None-Match`` (probed once, :meth:`_conditional_puts`) cannot hold one."""
        if not self._conditional_puts():
            raise ArchiveError(
                f"{self.root}: the S3 server ignores conditional writes (If-None-Match); "
                "an audit lease needs them (AWS S3, MinIO and the embedded server honour them)"
            )

    def _upload(self, key: str, data: bytes, digest: str, if_absent: bool = False) -> None:
        """PUT (multipart above the part size); ``if_absent``: raise :class:`KeyExists` when
        the key exists (the server answers 412 to ``If-None-Match: *``)."""
        k = self._k(key)
        meta = {"sha256": digest}
        cond = {"IfNoneMatch": "*"} if if_absent else {}
        # pages, stylesheets, scripts, fonts and images (reports, Data Docs) open in a browser
        # straight from the bucket only with their media type; everything else stays untyped
        media_type = web_type(key)
        typed = {"ContentType": media_type} if media_type else {}
        if len(data) <= self.part_size:
            self._op(
                "put",
                "put_object",
                key,
                Body=data,
                Metadata=meta,
                **cond,
                **typed,
                **self._checksum(digest),
            )
            return
        # multipart: nothing is visible under the key until CompleteMultipartUpload
        upload_id = self._op(
            "create multipart", "create_multipart_upload", key, Metadata=meta, **typed
        )["UploadId"]
        try:
            parts = []
            for n, pos in enumerate(range(0, len(data), self.part_size), 1):
                body = data[pos : pos + self.part_size]
                res = self._op(
                    f"upload part {n}",
                    "upload_part",
                    key,
                    UploadId=upload_id,
                    PartNumber=n,
                    Body=body,
                )
                parts.append({"PartNumber": n, "ETag": res["ETag"]})
            self._op(
                "complete multipart",
                "complete_multipart_upload",
                key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                **cond,
            )
        except BaseException:
            try:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=k, UploadId=upload_id)
            except Exception:  # best effort: the bucket's lifecycle rule cleans up leftovers
                log.warning("could not abort multipart upload of %s/%s", self.root, key)
            raise

    def _op(self, what: str, operation: str, key: str, **params: Any) -> Any:
        """One S3 ``operation`` on ``key`` (``_call``: counted, retried, errors translated)."""
        call = getattr(self._client, operation)
        return self._call(what, key, lambda: call(Bucket=self.bucket, Key=self._k(key), **params))

    def _checksum(self, digest: str) -> dict[str, str]:
        if not self._sha256_header:
            return {}
        return {"ChecksumSHA256": base64.b64encode(bytes.fromhex(digest)).decode("ascii")}

    def get(self, key: str, max_bytes: int | None = None) -> bytes:
        """At most ``max_bytes``: a larger declared length is refused before the body is read,
        and one byte more than the limit is read to tell an object that is longer still."""
        limit = MAX_OBJECT_BYTES if max_bytes is None else max_bytes
        where = f"{self.root}/{key}"

        def read() -> bytes:
            resp = self._client.get_object(Bucket=self.bucket, Key=self._k(key))
            body = resp["Body"]
            try:
                declared = int(resp.get("ContentLength") or 0)
                if declared > limit:
                    raise ObjectTooLargeError(
                        f"{where} is {declared} bytes, more than {limit}", limit
                    )
                data = body.read(limit + 1)
            finally:
                body.close()  # the rest of a longer body is dropped unread
            if len(data) > limit:
                raise ObjectTooLargeError(f"{where} holds more than {limit} bytes", limit)
            return data

        return self._call("get", key, read)

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
            kwargs["StartAfter"] = self.prefix + check_key(str(opts["start_after"]))
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

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """An HTTPS (or the endpoint's scheme) link anyone can GET ``key`` with for ``expires_s``
        seconds, signed locally with this store's credentials (no request is made)."""
        from botocore.config import Config
        from botocore.exceptions import NoCredentialsError

        signer = self._session.client(
            "s3",
            endpoint_url=self.endpoint_url,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )
        try:
            return signer.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": self._k(key)},
                ExpiresIn=int(expires_s),
            )
        except NoCredentialsError:
            raise ArchiveError(f"presigning {self.root}/{key}: {NO_CREDENTIALS}") from None

    def delete(self, key: str) -> None:
        self._call(
            "delete", key, lambda: self._client.delete_object(Bucket=self.bucket, Key=self._k(key))
        )
