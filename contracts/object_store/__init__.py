"""Object storage behind one small interface: S3 (boto3: AWS, MinIO, moto's server) and file://.

Keys are relative to the ROOT (``s3://bucket/prefix`` or ``file:///path``); the archive layout
(``contracts/archive_layout.py``) builds them. Immutable objects go through ``put``, which never
overwrites: identical content is a no-op, different content an ``ArchiveConflictError``.

Credentials come from boto3's standard chain unless given; they never appear in a repr, a log
line or an error message.

Modules: ``interface`` (the protocol, ``ObjectInfo``, key checks), ``spec`` (``StoreSpec``,
``open_store``), ``file_store`` (file://), ``s3_store`` (S3) with ``s3_errors`` (what an S3
answer means: retry, give up, not found).
"""

from contracts.object_store.file_store import FileObjectStore
from contracts.object_store.interface import DEFAULT_PART_SIZE, ObjectInfo, ObjectStore
from contracts.object_store.s3_store import S3ObjectStore
from contracts.object_store.spec import StoreSpec, open_store

__all__ = [
    "DEFAULT_PART_SIZE",
    "FileObjectStore",
    "ObjectInfo",
    "ObjectStore",
    "S3ObjectStore",
    "StoreSpec",
    "open_store",
]
