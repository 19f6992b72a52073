"""Property: the file:// listing with ``start_after`` is exactly the sorted keys under the prefix
that sort after it (the semantics of S3's ListObjectsV2 ``Prefix`` + ``StartAfter``)."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.object_store import open_store

PART = st.sampled_from(["a", "b", "a-0", "a.json", "b-1.log", "0", "00", "z_", "a0"])
KEY = st.lists(PART, min_size=1, max_size=4).map("/".join)


def consistent(keys: set[str]) -> set[str]:
    """Keys a file system can hold together: no key is a directory of another."""
    dirs = {k.rsplit("/", i)[0] for k in keys for i in range(1, k.count("/") + 1)}
    return {k for k in keys if k not in dirs}


@settings(max_examples=150, deadline=None)
@given(
    keys=st.sets(KEY, min_size=0, max_size=25),
    prefix=st.sampled_from(["", "a", "a/", "a-0/", "b/a", "a/b/", "z"]),
    after=st.one_of(st.none(), KEY, st.sampled_from(["", "a/", "a-", "b/a/0"])),
)
def test_file_listing_matches_s3_semantics(keys, prefix, after) -> None:
    keys = consistent(keys)
    with tempfile.TemporaryDirectory() as d:
        store = open_store(f"file://{d}")
        for k in keys:
            store.put(k, b"x")
        got = [o.key for o in store.list(prefix, start_after=after)]
    want = sorted(k for k in keys if k.startswith(prefix) and (not after or k > after))
    assert got == want


@settings(max_examples=100, deadline=None)
@given(keys=st.sets(KEY, min_size=0, max_size=25), prefix=st.sampled_from(["", "a/", "b/", "a"]))
def test_file_delimiter_listing_matches_s3_semantics(keys, prefix) -> None:
    keys = consistent(keys)
    with tempfile.TemporaryDirectory() as d:
        store = open_store(f"file://{d}")
        for k in keys:
            store.put(k, b"x")
        got = store.list_prefixes(prefix)
    want = sorted(
        {
            prefix + k[len(prefix) :].split("/", 1)[0] + "/"
            for k in keys
            if k.startswith(prefix) and "/" in k[len(prefix) :]
        }
    )
    assert got == want
