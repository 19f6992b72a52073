"""The embedded S3 server's listing (tools.s3server.list_from_a_sorted_index): ListObjectsV2
over real HTTP answers as S3 (and moto) does -- prefix, StartAfter, delimiter, 1,000-key pages,
deletes -- from a sorted index, so its cost follows what it returns, not the bucket's size."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.object_store import open_store

PART = st.sampled_from(["a", "b", "a-0", "a.json", "0", "00", "z_", "a0", "x"])
KEY = st.lists(PART, min_size=1, max_size=4).map("/".join)


def fresh(s3_server):
    bucket = f"haproof-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    return open_store(f"s3://{bucket}/p", **s3_server.store_options()), bucket


@settings(max_examples=25, deadline=None)
@given(
    keys=st.sets(KEY, min_size=0, max_size=15),
    gone=st.sets(KEY, max_size=5),
    prefix=st.sampled_from(["", "a", "a/", "b/a", "x/"]),
    after=st.one_of(st.none(), KEY, st.sampled_from(["a/", "a-", "b/a/0"])),
)
def test_listing_matches_s3_semantics(s3_server, keys, gone, prefix, after) -> None:
    store, _ = fresh(s3_server)
    for k in sorted(keys | gone):
        store.put(k, b"x")
    list(store.list(""))  # the index is built: later puts and deletes must reach it
    for k in sorted(gone - keys):
        store.delete(k)
    store.put("late/key", b"y")
    live = keys | {"late/key"}
    got = [o.key for o in store.list(prefix, start_after=after)]
    assert got == sorted(k for k in live if k.startswith(prefix) and (not after or k > after))
    want = sorted(
        {
            prefix + k[len(prefix) :].split("/", 1)[0] + "/"
            for k in live
            if k.startswith(prefix) and "/" in k[len(prefix) :]
        }
    )
    assert store.list_prefixes(prefix) == want


def test_pages_and_folders_of_a_large_bucket(s3_server) -> None:
    store, bucket = fresh(s3_server)
    client = s3_server.client()
    keys = [f"d{i % 3}/{i:05d}" for i in range(2500)]
    for k in keys:
        client.put_object(Bucket=bucket, Key=f"p/{k}", Body=b"")
    assert [o.key for o in store.list("")] == sorted(keys)  # three pages
    assert store.list_prefixes("") == ["d0/", "d1/", "d2/"]
    tail = [o.key for o in store.list("d1/", start_after="d1/02000")]
    assert tail == sorted(k for k in keys if k.startswith("d1/") and k > "d1/02000")


@settings(max_examples=200, deadline=None)
@given(
    idx=st.sets(KEY, max_size=20),
    recent=st.sets(KEY, max_size=8),
    start=st.sampled_from(["", "a", "a/", "b", "x/"]),
    after=st.one_of(st.none(), KEY),
    skip_at=st.integers(0, 30),
    skip_to=KEY,
)
def test_the_index_and_its_recent_run_read_as_one_sorted_run(
    idx, recent, start, after, skip_at, skip_to
) -> None:
    """Names put since the index was built wait in a run of their own; a listing reads both
    as one sorted sequence, from ``start`` after ``after``, and a skip lands on the first name
    at or above it (tools.s3server_index._names)."""
    from tools.s3server_index import _names

    recent = recent - idx
    union = sorted(idx | recent)
    want = [n for n in union if n >= start and (after is None or n > after)]
    gen = _names(sorted(idx), sorted(recent), start, after)
    got, expected = [], list(want)
    for n, name in enumerate(gen):
        got.append(name)
        if n == skip_at:
            gen.send(skip_to)
            expected = [x for x in want if x <= name or x >= skip_to]
    assert got == expected
