"""The same contract for both backends: file:// and S3 over HTTP to moto's server."""

from __future__ import annotations

import logging
import os

import pytest

from contracts.errors import (
    ArchiveConflictError,
    ArchiveError,
    ObjectNotFoundError,
    TransientArchiveError,
)
from contracts.object_store import StoreSpec, open_store
from tools.s3server import S3Server


def test_put_is_immutable_and_idempotent(object_store) -> None:
    assert object_store.put("v1/c/b/n/commitlog/x.log", b"abc") is True
    assert object_store.put("v1/c/b/n/commitlog/x.log", b"abc") is False
    with pytest.raises(ArchiveConflictError, match="different content"):
        object_store.put("v1/c/b/n/commitlog/x.log", b"abd")
    assert object_store.get("v1/c/b/n/commitlog/x.log") == b"abc"


def test_mutable_put_overwrites(object_store) -> None:
    object_store.put_mutable("v1/c/b/_audit/state.json", b"1")
    object_store.put_mutable("v1/c/b/_audit/state.json", b"2")
    assert object_store.get("v1/c/b/_audit/state.json") == b"2"


def test_list_is_sorted_and_prefixed(object_store) -> None:
    for k in ("v1/c/b/n/b.json", "v1/c/b/n/a.json", "v1/c/x/n/a.json", "other/z"):
        object_store.put(k, k.encode())
    keys = [o.key for o in object_store.list("v1/c/b/")]
    assert keys == ["v1/c/b/n/a.json", "v1/c/b/n/b.json"]
    sizes = {o.key: o.size for o in object_store.list("v1/")}
    assert sizes["v1/c/x/n/a.json"] == len(b"v1/c/x/n/a.json")


def test_range_reads(object_store) -> None:
    object_store.put("k/data", bytes(range(256)))
    assert object_store.get_range("k/data", 10, 20) == bytes(range(10, 20))
    assert object_store.get_range("k/data", 5, 5) == b""


def test_missing_object(object_store) -> None:
    with pytest.raises(ObjectNotFoundError, match="does not exist"):
        object_store.get("no/such/key")
    assert not object_store.exists("no/such/key")


def test_bad_keys_are_refused(object_store) -> None:
    for bad in ("", "/abs", "a/../b"):
        with pytest.raises(ArchiveError, match="invalid object key"):
            object_store.put(bad, b"x")


def test_multipart_upload_of_a_large_chunk(s3_server, s3_root) -> None:
    store = open_store(s3_root, part_size=5 * 1024 * 1024, **s3_server.store_options())
    data = os.urandom(12 * 1024 * 1024)
    assert store.put("v1/big.log", data)
    assert store.get("v1/big.log") == data
    parts = s3_server.client().head_object(
        Bucket=s3_root[5:].split("/")[0], Key="archive/v1/big.log"
    )
    assert "-3" in parts["ETag"]  # a 3-part multipart object
    assert store.put("v1/big.log", data) is False  # idempotent without re-reading the bytes


class _Calls:
    """The real boto3 client, counting its calls; ``strip_if_none_match`` drops the header, as
    a server that ignores it would (the real server then overwrites)."""

    def __init__(self, client, strip_if_none_match: bool = False) -> None:
        self._client, self.strip = client, strip_if_none_match
        self.calls: list[str] = []

    def __getattr__(self, name):
        fn = getattr(self._client, name)

        def call(**kw):
            self.calls.append(name)
            if self.strip:
                kw.pop("IfNoneMatch", None)
            return fn(**kw)

        return call


@pytest.mark.parametrize("size", [3, 7 * 1024 * 1024])  # one PUT; multipart (5 MiB parts)
def test_a_new_object_is_one_conditional_write_and_a_taken_key_is_never_overwritten(
    s3_server, s3_root, size
) -> None:
    store = open_store(s3_root, part_size=5 * 1024 * 1024, **s3_server.store_options())
    calls = _Calls(store._client)
    store._client = calls
    data = os.urandom(size)
    assert store.put("v1/a.log", data) is True
    probe = ["put_object", "put_object", "delete_object"]  # the once-per-store probe
    writes = (
        ["put_object"]
        if size < 5 << 20
        else ["create_multipart_upload", "upload_part", "upload_part", "complete_multipart_upload"]
    )
    assert calls.calls == probe + writes  # no HEAD before a write
    assert [o.key for o in store.list("")] == ["v1/a.log"]  # the probe is gone
    calls.calls.clear()
    assert store.put("v1/a.log", data) is False  # same bytes: refused, then found identical
    with pytest.raises(ArchiveConflictError, match="different content"):
        store.put("v1/a.log", data[:-1] + bytes([data[-1] ^ 1]))  # one bit differs
    assert store.get("v1/a.log") == data
    assert "head_object" in calls.calls


def test_a_server_ignoring_if_none_match_gets_a_head_before_each_write(s3_server, s3_root) -> None:
    store = open_store(s3_root, **s3_server.store_options())
    calls = _Calls(store._client, strip_if_none_match=True)
    store._client = calls
    assert store.put("v1/a.log", b"abc") is True
    assert calls.calls[-2:] == ["head_object", "put_object"]
    with pytest.raises(ArchiveConflictError, match="different content"):
        store.put("v1/a.log", b"abd")
    assert store.get("v1/a.log") == b"abc"
    assert [o.key for o in store.list("")] == ["v1/a.log"]


def test_missing_bucket_is_a_clear_permanent_error(s3_server) -> None:
    store = open_store("s3://no-such-bucket-here", **s3_server.store_options())
    with pytest.raises(ArchiveError, match="bucket no-such-bucket-here does not exist"):
        store.put("k", b"x")


def test_unreachable_endpoint_retries_boundedly_without_leaking_secrets(caplog) -> None:
    store = open_store(
        "s3://bucket",
        endpoint_url="http://127.0.0.1:9",
        access_key="AKIAEXAMPLEKEY",
        secret_key="VERY-SECRET-VALUE",
        retries=2,
    )
    store._sleep = lambda s: None
    caplog.set_level(logging.DEBUG)
    with pytest.raises(TransientArchiveError) as exc:
        store.get("k")
    assert "after 3 attempts" in str(exc.value) and "127.0.0.1:9" in str(exc.value)
    ours = "".join(
        r.getMessage() for r in caplog.records if r.name.startswith(("broker", "contracts"))
    )
    assert "retry 1" in ours
    text = str(exc.value) + ours + repr(store)
    assert "VERY-SECRET-VALUE" not in text and "AKIAEXAMPLEKEY" not in text
    assert "VERY-SECRET-VALUE" not in caplog.text  # not even in botocore's debug output
    spec = StoreSpec("s3://bucket", access_key="AKIAEXAMPLEKEY", secret_key="VERY-SECRET-VALUE")
    assert "VERY-SECRET" not in repr(spec) and "AKIAEXAMPLE" not in repr(spec)


def test_storage_that_comes_back_catches_up(tmp_path) -> None:
    server = S3Server.start()
    port = server.port
    server.create_bucket("back")
    store = open_store("s3://back", **server.store_options(), retries=1)
    store._sleep = lambda s: None
    store.put("a", b"1")
    server.stop()
    with pytest.raises(TransientArchiveError):
        store.put("b", b"2")
    server = S3Server.start(port=port)  # same endpoint, fresh (empty) server
    try:
        server.create_bucket("back")
        assert store.put("b", b"2") is True
    finally:
        server.stop()


def test_unsupported_scheme() -> None:
    with pytest.raises(ArchiveError, match="unsupported scheme"):
        open_store("gs://x/y")


def test_list_start_after_returns_only_later_keys(object_store) -> None:
    keys = [
        f"v1/c/b/n/commitlog/{i:020d}-{i + 1:020d}-0.{ext}"
        for i in range(5)
        for ext in ("json", "log")
    ]
    for k in keys + ["v1/c/b/n/snapshots/0000000000001.json", "v1/c/b/m/commitlog/x.log"]:
        object_store.put(k, b"x")
    prefix = "v1/c/b/n/commitlog/"
    assert [o.key for o in object_store.list(prefix)] == sorted(keys)
    after = keys[5]  # ...2-...3-0.log
    got = [o.key for o in object_store.list(prefix, start_after=after)]
    assert got == sorted(k for k in keys if k > after) and len(got) == 4
    assert list(object_store.list(prefix, start_after=sorted(keys)[-1])) == []
    # a start_after below the prefix's subtree lists everything under the prefix
    assert len(list(object_store.list("v1/c/b/", start_after="v1/c/a"))) == len(keys) + 2
    # start_after inside one node's directory: the later node's keys all follow
    later = [o.key for o in object_store.list("v1/c/b/", start_after="v1/c/b/m/commitlog/x.log")]
    assert later == sorted(keys) + ["v1/c/b/n/snapshots/0000000000001.json"]


def test_list_prefixes_is_a_delimiter_listing(object_store) -> None:
    for k in ("v1/c/a/n1/x", "v1/c/a/n2/y/z", "v1/c/b/n1/x", "v1/d/q/n/x", "v1/c/top.json"):
        object_store.put(k, b"x")
    assert object_store.list_prefixes("v1/c/") == ["v1/c/a/", "v1/c/b/"]
    assert object_store.list_prefixes("v1/c/a/") == ["v1/c/a/n1/", "v1/c/a/n2/"]
    assert object_store.list_prefixes("v1/nothing/") == []


def test_requests_are_counted(object_store) -> None:
    for i in range(3):
        object_store.put(f"v1/c/b/n/k{i}", b"x")
    before = object_store.requests["list"]
    assert len(list(object_store.list("v1/c/b/n/", start_after="v1/c/b/n/k1"))) == 1
    assert object_store.requests["list"] - before >= 1
    before = object_store.requests["get"]
    object_store.get("v1/c/b/n/k0")
    assert object_store.requests["get"] == before + 1


def test_resolved_spec_carries_the_drivers_settings_without_showing_the_secret(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIADRIVER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "driver-secret-value")
    monkeypatch.setenv("HAPROOF_S3_ENDPOINT", "http://127.0.0.1:1")
    spec = StoreSpec("s3://bucket/prefix").resolved()
    assert (spec.access_key, spec.secret_key) == ("AKIADRIVER", "driver-secret-value")
    assert spec.endpoint_url == "http://127.0.0.1:1"
    assert "driver-secret-value" not in repr(spec)
    assert StoreSpec("file:///tmp/x").resolved() == StoreSpec("file:///tmp/x")


def test_reads_are_bounded_and_a_longer_object_is_told(object_store) -> None:
    from contracts.errors import ObjectTooLargeError

    object_store.put("v1/c/b/n/big.log", b"x" * 1000)
    assert object_store.get("v1/c/b/n/big.log", 1000) == b"x" * 1000
    with pytest.raises(ObjectTooLargeError) as err:
        object_store.get("v1/c/b/n/big.log", 999)
    assert err.value.limit == 999 and "big.log" in str(err.value)
