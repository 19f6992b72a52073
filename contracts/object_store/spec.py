"""Opening a store: ``open_store`` and the picklable ``StoreSpec`` executors re-open it from."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from urllib.parse import urlparse

from contracts.errors import ArchiveError
from contracts.object_store.file_store import FileObjectStore
from contracts.object_store.interface import DEFAULT_PART_SIZE, ObjectStore
from contracts.object_store.s3_store import S3ObjectStore


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
        options = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "root"}
        return open_store(self.root, **options)

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


def check_root(root: str) -> None:
    """ArchiveError when ``root`` can never be opened (scheme, bucket, directory)."""
    parsed = urlparse(root)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ArchiveError(f"archive root {root!r} names no bucket (s3://bucket/prefix)")
    elif parsed.scheme in ("file", ""):
        if not (parsed.path if parsed.scheme == "file" else root):
            raise ArchiveError(f"archive root {root!r} names no directory")
    else:
        raise ArchiveError(
            f"archive root {root!r}: unsupported scheme {parsed.scheme!r} (s3, file)"
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
    check_root(root)
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
