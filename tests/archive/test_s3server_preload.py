"""The embedded S3 server's preload (tools/s3server_preload.py): a bucket filled from a
directory before the server answers holds every object the ``file://`` store sees there, and
each preloaded object is answered (GET, HEAD, range GET, checksum, listing) exactly as the same
bytes PUT over HTTP by ``S3ObjectStore``; objects written afterwards list in order with them."""

from __future__ import annotations

import os

import pytest

from contracts.errors import ArchiveError
from contracts.object_store import open_store
from tools.s3server import S3Server

FILES = {
    "_audit/state.json": b'{"version": 1}',
    "hist/g0/n0/commitlog/00000000000000000000-00000000000000000172.log": os.urandom(172),
    "hist/g0/n0/commitlog/big.log": os.urandom(300_000),
    "reports/index.html": b"<html></html>",  # a web page: stored with its media type
    "hist/g0/empty": b"",
}


@pytest.fixture(scope="module")
def preloaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    for key, data in FILES.items():
        os.makedirs(os.path.dirname(root / key), exist_ok=True)
        (root / key).write_bytes(data)
    (root / "hist/g0/n0/commitlog/x.log.tmp-123").write_bytes(b"a write in progress")
    server = S3Server.start(preload={"pre": ("archive", str(root))})
    server.create_bucket("put")
    put = open_store("s3://put/archive", **server.store_options())
    for key, data in FILES.items():
        put.put_mutable(key, data)
    yield server
    server.stop()


def _same(a: dict, b: dict) -> dict:
    """A response without what differs between any two requests or objects."""
    skip = {"ResponseMetadata", "LastModified", "Body"}
    return {k: v for k, v in a.items() if k not in skip} == {
        k: v for k, v in b.items() if k not in skip
    }


def test_the_preload_reports_what_it_stored(preloaded) -> None:
    assert preloaded.preloaded["objects"] == len(FILES)  # not the .tmp- file
    assert preloaded.preloaded["bytes"] == sum(len(d) for d in FILES.values())
    assert preloaded.preloaded["s"] >= 0


@pytest.mark.parametrize("key", sorted(FILES))
def test_a_preloaded_object_answers_as_one_put_over_http(preloaded, key) -> None:
    c = preloaded.client()
    name = f"archive/{key}"
    heads = [c.head_object(Bucket=b, Key=name, ChecksumMode="ENABLED") for b in ("pre", "put")]
    assert _same(*heads), heads
    assert heads[0]["Metadata"]["sha256"] and heads[0]["ETag"]
    gets = [c.get_object(Bucket=b, Key=name) for b in ("pre", "put")]
    bodies = [g["Body"].read() for g in gets]
    assert bodies[0] == bodies[1] == FILES[key] and _same(*gets)
    if FILES[key]:
        span = f"bytes=3-{min(len(FILES[key]), 200_000) - 1}"
        ranged = [c.get_object(Bucket=b, Key=name, Range=span) for b in ("pre", "put")]
        assert _same(*ranged), ranged
        assert ranged[0]["Body"].read() == ranged[1]["Body"].read() == FILES[key][3:200_000]


def test_listings_match_and_later_puts_join_them(preloaded) -> None:
    c = preloaded.client()

    def listing(bucket: str, **kw) -> list[tuple]:
        page = c.list_objects_v2(Bucket=bucket, Prefix="archive/", **kw)
        return [(o["Key"], o["Size"], o["ETag"], o["StorageClass"]) for o in page["Contents"]]

    assert listing("pre") == listing("put")
    assert [k for k, *_ in listing("pre")] == sorted(f"archive/{k}" for k in FILES)
    pre = open_store("s3://pre/archive", **preloaded.store_options())
    pre.put_mutable("hist/g0/n0/commitlog/a-late.log", b"late")
    assert pre.get("hist/g0/n0/commitlog/a-late.log") == b"late"
    keys = [o.key for o in pre.list("hist/g0/n0/", start_after="hist/g0/n0/commitlog/1")]
    assert keys == ["hist/g0/n0/commitlog/a-late.log", "hist/g0/n0/commitlog/big.log"]
    folders = c.list_objects_v2(Bucket="pre", Prefix="archive/", Delimiter="/")
    assert [p["Prefix"] for p in folders["CommonPrefixes"]] == [
        "archive/_audit/",
        "archive/hist/",
        "archive/reports/",
    ]


def test_unusable_preloads_are_named_in_one_line(tmp_path) -> None:
    with pytest.raises(ArchiveError, match="nowhere.*is not a directory") as missing:
        S3Server.start(preload={"pre": ("", str(tmp_path / "nowhere"))})
    assert "Traceback" not in str(missing.value) and "\n" not in str(missing.value)
    with pytest.raises(ArchiveError, match="cannot create bucket 'b!'"):
        S3Server.start(preload={"b!": ("", str(tmp_path))})


def test_lean_keys_keep_what_differs_from_the_usual(preloaded) -> None:
    """Keys hold only what differs from what nearly every key holds (tools/s3server_keys.py):
    a key PUT with unusual settings answers them, and a versioned listing (which deep-copies
    keys) and an overwrite still work."""
    c = preloaded.client()
    c.put_object(
        Bucket="put",
        Key="odd",
        Body=b"odd",
        StorageClass="STANDARD_IA",
        WebsiteRedirectLocation="/elsewhere",
        ServerSideEncryption="AES256",
        Metadata={"Who": "me"},
        ContentType="text/plain",
    )
    head = c.head_object(Bucket="put", Key="odd")
    assert head["StorageClass"] == "STANDARD_IA" and head["ServerSideEncryption"] == "AES256"
    assert head["WebsiteRedirectLocation"] == "/elsewhere" and head["Metadata"] == {"who": "me"}
    assert head["ContentType"] == "text/plain"
    plain = c.head_object(Bucket="put", Key="archive/_audit/state.json")
    assert "StorageClass" not in plain and "ServerSideEncryption" not in plain
    versions = c.list_object_versions(Bucket="put", Prefix="odd")["Versions"]
    assert [(v["Key"], v["VersionId"], v["Size"]) for v in versions] == [("odd", "null", 3)]
    c.put_object(Bucket="put", Key="odd", Body=b"even")
    head = c.head_object(Bucket="put", Key="odd")
    assert "StorageClass" not in head and "WebsiteRedirectLocation" not in head
    assert c.get_object(Bucket="put", Key="odd")["Body"].read() == b"even"
    c.delete_object(Bucket="put", Key="odd")
    assert "Contents" not in c.list_objects_v2(Bucket="put", Prefix="odd")
