"""The embedded S3 server's write path (tools.s3server): a body read in one piece and
stored without copies still reads back byte for byte with S3's ETags (MD5 for a single PUT,
"<md5 of the parts' md5s>-<parts>" for multipart); a body cut short is a disconnect, as in
werkzeug; the S3 backend does not hash payloads for signing, nor CRC32 its parts, on loopback
only, and every single PUT carries the SHA-256 its manifest records."""

from __future__ import annotations

import base64
import hashlib
import os
import uuid

import pytest

from contracts.errors import ArchiveError, TransientArchiveError
from contracts.object_store import S3ObjectStore, open_store
from contracts.object_store.s3_errors import is_loopback


@pytest.fixture
def bucket(s3_server):
    client = s3_server.client()
    name = f"puts-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=name)
    return client, name


@pytest.mark.parametrize("size", [0, 1, 64 * 1024 + 3, 9 * 1024 * 1024 + 17])
def test_put_reads_back_with_its_md5_etag(bucket, size) -> None:
    client, name = bucket
    data = os.urandom(size)
    put = client.put_object(Bucket=name, Key="k", Body=data)
    assert put["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    got = client.get_object(Bucket=name, Key="k")
    assert got["Body"].read() == data and got["ETag"] == put["ETag"]
    assert client.head_object(Bucket=name, Key="k")["ContentLength"] == size
    # a second PUT of the same name replaces the object (a new key, not a write into the old)
    client.put_object(Bucket=name, Key="k", Body=b"other")
    assert client.get_object(Bucket=name, Key="k")["Body"].read() == b"other"
    if size:
        assert client.get_object(Bucket=name, Key="k", Range="bytes=0-0")["Body"].read() == b"o"


def test_multipart_keeps_its_etag_and_bytes(bucket) -> None:
    client, name = bucket
    parts = [os.urandom(5 * 1024 * 1024), os.urandom(1234)]
    up = client.create_multipart_upload(Bucket=name, Key="mp")
    etags = [
        client.upload_part(
            Bucket=name, Key="mp", UploadId=up["UploadId"], PartNumber=i + 1, Body=p
        )["ETag"]
        for i, p in enumerate(parts)
    ]
    done = client.complete_multipart_upload(
        Bucket=name,
        Key="mp",
        UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": i + 1} for i, e in enumerate(etags)]},
    )
    md5s = b"".join(hashlib.md5(p).digest() for p in parts)
    assert done["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-2"'
    assert client.get_object(Bucket=name, Key="mp")["Body"].read() == b"".join(parts)


def test_a_body_read_in_one_piece_and_a_short_one_is_a_disconnect(monkeypatch) -> None:
    # werkzeug's LimitedStream patched as in the server process, over an in-memory stream
    import io

    from werkzeug.exceptions import ClientDisconnected
    from werkzeug.wsgi import LimitedStream

    from tools.s3server_writes import read_bodies_in_one_piece

    monkeypatch.setattr(LimitedStream, "readall", LimitedStream.readall)
    read_bodies_in_one_piece()
    data = os.urandom(300_000)
    reads = []

    class Reader(io.BufferedReader):
        def read(self, n=-1):
            reads.append(n)
            return super().read(n)

    body = LimitedStream(Reader(io.BytesIO(data + b"next request")), len(data))
    assert body.readall() == data and reads == [len(data)]
    assert body.readall() == b""  # exhausted: nothing past the limit
    torn = LimitedStream(io.BufferedReader(io.BytesIO(data[:1000])), len(data))
    with pytest.raises(ClientDisconnected):
        torn.readall()
    # a body capped by a maximum (no Content-Length) keeps werkzeug's own reads
    capped = LimitedStream(io.BufferedReader(io.BytesIO(b"abc")), 10, is_max=True)
    assert capped.readall() == b"abc"


def _bare_store(url: str | None, **options) -> S3ObjectStore:
    """An S3 store with made-up credentials: building it makes no request."""
    settings = dict(region="us-east-1", access_key="a", secret_key="s", retries=0)
    return S3ObjectStore(
        "s3://b/p", "b", "p", endpoint_url=url, part_size=5 << 20, **{**settings, **options}
    )


@pytest.mark.parametrize(
    "url, loopback",
    [
        ("http://127.0.0.1:9000", True),
        ("http://localhost:9000", True),
        ("http://[::1]:9000", True),
        ("http://10.0.0.5:9000", False),
        ("https://s3.eu-west-1.amazonaws.com", False),
        (None, False),
    ],
)
def test_loopback_endpoints_skip_payload_signing_and_part_crcs(url, loopback) -> None:
    assert is_loopback(url) is loopback
    config = _bare_store(url)._client.meta.config
    assert (config.s3 or {}).get("payload_signing_enabled", True) is (not loopback)
    assert config.request_checksum_calculation == (
        "when_required" if loopback else "when_supported"
    )


def test_a_store_configured_without_checksums_sends_no_sha256_either(monkeypatch) -> None:
    """S3-compatible stores that refuse checksum headers are set up with botocore's switch."""
    digest = hashlib.sha256(b"x").hexdigest()
    want = {"ChecksumSHA256": base64.b64encode(hashlib.sha256(b"x").digest()).decode()}
    assert _bare_store("http://10.0.0.5:9000")._checksum(digest) == want
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    assert _bare_store("http://10.0.0.5:9000")._checksum(digest) == {}
    assert _bare_store("http://127.0.0.1:9000")._checksum(digest) == want  # the embedded server


def test_single_puts_carry_their_sha256_and_loopback_parts_no_crc(s3_server, s3_root) -> None:
    store = open_store(s3_root, part_size=5 * 1024 * 1024, **s3_server.store_options())
    sent: list[tuple[str, dict[str, bytes]]] = []

    def record(request, **_kw) -> None:
        checksums = {k.lower(): v for k, v in request.headers.items() if "checksum" in k.lower()}
        sent.append(
            (
                request.method
                + " "
                + request.url.split("?")[0].rsplit("/", 1)[-1]
                + ("?part" if "partNumber=" in request.url else ""),
                checksums,
            )
        )

    store._client.meta.events.register("before-send.s3", record)
    small, big = os.urandom(1000), os.urandom(11 * 1024 * 1024)
    assert store.put("v1/small.log", small) and store.put("v1/big.log", big)
    assert store.get("v1/small.log") == small and store.get("v1/big.log") == big
    by_what = dict(sent)
    want = base64.b64encode(hashlib.sha256(small).digest())
    assert by_what["PUT small.log"] == {"x-amz-checksum-sha256": want}
    assert by_what["PUT big.log?part"] == {}  # 3 parts, none CRC32'd on loopback
    assert sum(what == "PUT big.log?part" for what, _ in sent) == 3
    assert not any("x-amz-checksum-crc32" in h for _, h in sent)


def test_a_bad_digest_is_retried_then_reported(monkeypatch) -> None:
    """S3 answers BadDigest when the bytes it got do not match the checksum sent: the bytes
    changed on the way, so the PUT is sent again (bounded), unlike a permanent refusal."""
    from botocore.exceptions import ClientError

    store = _bare_store("http://127.0.0.1:1", retries=2, sleep=lambda s: None)
    answers = iter(["BadDigest", "BadDigest", None])

    def put(**_kw):
        code = next(answers)
        if code:
            status = 403 if code == "AccessDenied" else 400
            raise ClientError(
                {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                "PutObject",
            )
        return {}

    assert store._call("put", "k", lambda: put()) == {}
    store.retries = 1
    answers = iter(["BadDigest", "BadDigest", None])
    with pytest.raises(TransientArchiveError, match="BadDigest"):
        store._call("put", "k", lambda: put())
    answers = iter(["AccessDenied", None])
    with pytest.raises(ArchiveError, match="access denied to b"):
        store._call("put", "k", lambda: put())


def test_moto_lists_its_service_packages_once(monkeypatch) -> None:
    from moto import backends

    from tools.s3server import list_moto_modules_once

    monkeypatch.setattr(backends, "list_of_moto_modules", backends.list_of_moto_modules)
    listings = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: listings.append(p) or real_listdir(p))
    list_moto_modules_once()
    first = backends.list_of_moto_modules()
    assert "s3" in first and backends.list_of_moto_modules() == first
    assert len(listings) == 1
