"""The embedded S3 server's ListObjectsV2 from a sorted index of key names (a moto patch that
runs in the server process; see ``tools/s3server.py``)."""

from __future__ import annotations

import bisect
import threading

_LOCK = threading.RLock()
_INSTALLED = False


def installed() -> bool:
    """Is :func:`list_from_a_sorted_index` in effect in this process?"""
    return _INSTALLED


#: names put since the index was built wait in a small sorted run of their own, merged into
#: the index once they are this many (or a 32nd of it): merging on every listing after a put
#: copied and re-sorted a year's 4 M names (0.6 s) for a listing of a handful
RECENT_MAX = 4096


def _index(store) -> tuple[list[str], list[str]]:
    """The bucket's sorted key names, built on its first listing: (the index, the sorted names
    put since, not yet merged into it)."""
    idx = store.__dict__.get("_haproof_index")
    recent = store.__dict__.get("_haproof_recent")
    if idx is None:
        idx, recent = sorted(dict.keys(store)), []
    elif len(recent) > max(RECENT_MAX, len(idx) >> 5):
        idx, recent = sorted(idx + recent), []  # two sorted runs: one C merge
    store.__dict__["_haproof_index"], store.__dict__["_haproof_recent"] = idx, recent
    return idx, recent


def _names(idx: list[str], recent: list[str], start: str, after: str | None):
    """The names of both sorted runs from ``start`` (and after ``after``) in order; sending a
    name back skips to the first name at or above it."""
    i, j = bisect.bisect_left(idx, start), bisect.bisect_left(recent, start)
    if after:
        i, j = max(i, bisect.bisect_right(idx, after)), max(j, bisect.bisect_right(recent, after))
    while i < len(idx) or j < len(recent):
        if j >= len(recent) or (i < len(idx) and idx[i] <= recent[j]):
            name = idx[i]
            i += 1
        else:
            name = recent[j]
            j += 1
        skip = yield name
        if skip is not None:  # past every name below ``skip``
            i, j = bisect.bisect_left(idx, skip, i), bisect.bisect_left(recent, skip, j)
            yield None  # (the value of the send)


def _page(
    bucket,
    prefix: str,
    delimiter: str | None,
    after: str | None,
    max_keys: int,
    delete_marker: type,
) -> list:
    """Keys and common prefixes after ``after`` under ``prefix``, one more than a page (moto's
    ``_truncate_result`` cuts it and makes the token)."""
    out: list = []
    with _LOCK:
        names = _names(*_index(bucket.keys), prefix, after)
        for name in names:
            if len(out) > max_keys or not name.startswith(prefix):
                break
            rest = name[len(prefix) :]
            if delimiter and delimiter in rest:
                folder = prefix + rest.split(delimiter)[0] + delimiter
                if not after or folder > after:
                    out.append(folder)
                names.send(folder[:-1] + chr(ord(folder[-1]) + 1))  # past the folder
                continue
            key = bucket.keys[name]
            if not isinstance(key, delete_marker):
                out.append(key)
    return out


def list_from_a_sorted_index() -> None:
    """Patch moto, in the server process, so that ListObjectsV2 answers from a sorted index of
    each bucket's key names, as S3 does: moto's own listing walks, copies and sorts every key of
    the bucket for each page (a page of a million-key bucket cost seconds, and a full listing
    was quadratic), so a listing's cost followed the bucket's size instead of what it returned.
    The index is built on a bucket's first listing; names put since wait in a small sorted run
    beside it (listings merge the two as they go) until it is large enough to be merged in,
    deletes leave either at once. The keys returned,
    common prefixes, ``StartAfter``, continuation tokens and page sizes are moto's."""
    from moto.s3.models import FakeDeleteMarker, FakeTableStorageBucket, S3Backend
    from moto.s3.utils import _VersionedKeyStore

    set_item, set_list, pop = (
        _VersionedKeyStore.__setitem__,
        _VersionedKeyStore.setlist,
        _VersionedKeyStore.pop,
    )

    def adding(store, key, setter, value) -> None:
        with _LOCK:
            new = not dict.__contains__(store, key)
            setter(store, key, value)
            if new and "_haproof_index" in store.__dict__:
                bisect.insort(store.__dict__["_haproof_recent"], key)

    def pop_key(self, key):
        with _LOCK:
            pop(self, key)
            for run in (self.__dict__.get("_haproof_index"), self.__dict__.get("_haproof_recent")):
                i = bisect.bisect_left(run, key) if run is not None else 0
                if run is not None and i < len(run) and run[i] == key:
                    del run[i]

    _VersionedKeyStore.__setitem__ = lambda self, k, v: adding(self, k, set_item, v)
    _VersionedKeyStore.setlist = lambda self, k, v: adding(self, k, set_list, v)
    _VersionedKeyStore.pop = pop_key
    listing = S3Backend.list_objects_v2

    def list_objects_v2(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys):
        if isinstance(bucket, FakeTableStorageBucket):
            return listing(
                self, bucket, prefix, delimiter, continuation_token, start_after, max_keys
            )
        after = (
            self._pagination_tokens.get(continuation_token) if continuation_token else start_after
        )
        out = _page(bucket, prefix or "", delimiter, after, max_keys, FakeDeleteMarker)
        return self._truncate_result(out, max_keys)

    S3Backend.list_objects_v2 = list_objects_v2
    global _INSTALLED
    _INSTALLED = True
