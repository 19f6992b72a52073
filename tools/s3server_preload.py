"""The embedded S3 server's preload: a bucket filled from a directory before the server answers
(runs in the server process; see ``tools/s3server.py``).

``S3Server.start(preload={"bucket": ("prefix", "/dir")})`` passes the map to the subprocess in
:data:`PRELOAD_ENV`; before moto's HTTP server starts, every object of the directory, as the
``file://`` store sees it (every regular file below it, except writes in progress: names with
``.tmp-``, which its listings skip too), becomes the key ``prefix/<path below the directory>``
holding the file's bytes, stored straight into moto's backend (no HTTP request per object).

Each key is stored as ``S3ObjectStore.put_mutable`` would have stored it with one PUT: the same
bytes, the MD5 ETag of a single PUT, the ``sha256`` user metadata, the SHA-256 checksum, the
media type of a web page (``web_type``), the bucket's ACL; Last-Modified is the preload's time.
(Above the store's part size that PUT would have been multipart, with a "<md5>-<parts>" ETag;
the preload always stores one piece.) Objects written afterwards through the API behave as
before; the listing index (``tools/s3server_index.py``) is built at the end of the preload, so
the first listing does not sort the whole bucket.

The preload runs with Python's cyclic garbage collector off (nothing it creates is garbage) and
ends with ``gc.freeze()``: the millions of objects of a preloaded year are not scanned again by
every full collection while the server answers (they are still freed, by reference counting,
when a key is deleted or replaced). ``HAPROOF_S3_PRELOAD_GC=1`` leaves the collector alone.

What the preload did is written as one JSON object to the file named by :data:`REPORT_ENV`
(``objects``, ``bytes``, ``s``), which ``S3Server.start`` reads once the server answers.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator

from contracts.errors import ArchiveError

PRELOAD_ENV = "HAPROOF_S3_PRELOAD"  # JSON {"bucket": ["prefix", "/dir"], ...}
REPORT_ENV = "HAPROOF_S3_PRELOAD_REPORT"  # where the server writes what it preloaded
REGION = "us-east-1"
UNSIGNED = "UNSIGNED-PAYLOAD"


def walk_objects(directory: str) -> Iterator[tuple[str, str]]:
    """(key below ``directory``, file path) of every object the ``file://`` store would list
    there: regular files, not ``.tmp-`` writes in progress; symbolic links to directories are not
    followed. In no particular order."""
    todo = [""]
    while todo:
        rel = todo.pop()
        with os.scandir(os.path.join(directory, rel) if rel else directory) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    todo.append(rel + e.name + "/")
                elif ".tmp-" not in e.name and e.is_file():
                    yield rel + e.name, e.path


def store_like_a_put(backend, bucket, name: str, data: bytes) -> None:
    """``name`` := ``data`` in ``bucket``, as moto's PUT handler stores a single PUT of
    ``S3ObjectStore`` on this (loopback) server: ``put_object``, then the headers it keeps as
    metadata (``x-amz-meta-sha256``; ``x-amz-content-sha256``, ``UNSIGNED-PAYLOAD`` as payloads
    are not signed on loopback; the media type of a web page), the bucket's ACL, no redirect.
    No checksum: the client's SHA-256 reaches moto in a form it does not keep (a PUT over HTTP
    answers no ``x-amz-checksum-sha256`` either). No tags, no notification."""
    from contracts.object_store.interface import web_type

    key = backend.put_object(bucket.name, name, data, storage="STANDARD", disable_notification=True)
    meta = {
        "x-amz-meta-sha256": hashlib.sha256(data).hexdigest(),
        "x-amz-content-sha256": UNSIGNED,
    }
    media_type = web_type(name)
    if media_type:
        meta["Content-Type"] = media_type
    key.set_metadata(meta)
    key.set_acl(bucket.acl)
    key.website_redirect_location = None


def preload(buckets: dict[str, tuple[str, str]]) -> dict:
    """Create each bucket and fill it from its directory; its figures."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    t0 = time.monotonic()
    objects = size = 0
    if os.environ.get("HAPROOF_S3_PRELOAD_GC") != "1":
        gc.disable()  # nothing loaded is garbage: no collection while millions of keys arrive
    try:
        objects, size = _fill(backend, buckets)
    finally:
        gc.freeze()  # what was loaded stays out of the collector's scans from now on
        gc.enable()
    return {"objects": objects, "bytes": size, "s": round(time.monotonic() - t0, 3)}


def _fill(backend, buckets: dict[str, tuple[str, str]]) -> tuple[int, int]:
    objects = size = 0
    for bucket_name, (prefix, directory) in buckets.items():
        if not os.path.isdir(directory):
            raise ArchiveError(f"S3 preload: {directory} (bucket {bucket_name}) is not a directory")
        try:
            bucket = backend.create_bucket(bucket_name, REGION)
        except Exception as exc:  # moto's refusals (invalid name...) are plain exceptions
            raise ArchiveError(f"S3 preload: cannot create bucket {bucket_name!r}: {exc}") from exc
        head = prefix.strip("/") + "/" if prefix.strip("/") else ""
        for rel, path in walk_objects(directory):
            with open(path, "rb") as fh:
                data = fh.read()
            store_like_a_put(backend, bucket, head + rel, data)
            objects += 1
            size += len(data)
        index_now(bucket)
    return objects, size


def index_now(bucket) -> None:
    """Build the bucket's listing index now (when listings come from it), not on a listing."""
    from tools import s3server_index

    if s3server_index.installed():
        with s3server_index._LOCK:
            s3server_index._index(bucket.keys)


def preload_from_env() -> None:
    """In the server process: the preload :data:`PRELOAD_ENV` asks for, if any; its figures to
    :data:`REPORT_ENV`."""
    spec = os.environ.get(PRELOAD_ENV)
    if not spec:
        return
    buckets = {b: (str(p), str(d)) for b, (p, d) in json.loads(spec).items()}
    try:
        report = preload(buckets)
    except (ArchiveError, OSError) as exc:  # one line for S3Server.start to show
        print(f"{exc}", file=sys.stderr)
        sys.exit(2)
    path = os.environ.get(REPORT_ENV)
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(report, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
