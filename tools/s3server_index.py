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


def _index(store) -> list[str]:
    """The bucket's sorted key names, built on its first listing; names put since are merged in."""
    idx = store.__dict__.get("_haproof_index")
    if idx is None:
        idx = sorted(dict.keys(store))
    elif store.__dict__.get("_haproof_new"):
        idx = sorted(idx + sorted(store.__dict__["_haproof_new"]))
    store.__dict__["_haproof_index"], store.__dict__["_haproof_new"] = idx, set()
    return idx


def _page(bucket, prefix: str, delimiter: str | None, after: str | None, max_keys: int,
          delete_marker: type) -> list:  # fmt: skip
    """Keys and common prefixes after ``after`` under ``prefix``, one more than a page (moto's
    ``_truncate_result`` cuts it and makes the token)."""
    out: list = []
    with _LOCK:
        idx = _index(bucket.keys)
        i = bisect.bisect_left(idx, prefix)
        if after:
            i = max(i, bisect.bisect_right(idx, after))
        while i < len(idx) and len(out) <= max_keys:
            name = idx[i]
            if not name.startswith(prefix):
                break
            rest = name[len(prefix) :]
            if delimiter and delimiter in rest:
                folder = prefix + rest.split(delimiter)[0] + delimiter
                if not after or folder > after:
                    out.append(folder)
                # past every name under the folder
                i = bisect.bisect_left(idx, folder[:-1] + chr(ord(folder[-1]) + 1), i)
                continue
            key = bucket.keys[name]
            if not isinstance(key, delete_marker):
                out.append(key)
            i += 1
    return out


def list_from_a_sorted_index() -> None:
    """Patch moto, in the server process, so that ListObjectsV2 answers from a sorted index of
    each bucket's key names, as S3 does: moto's own listing walks, copies and sorts every key of
    the bucket for each page (a page of a million-key bucket cost seconds, and a full listing
    was quadratic), so a listing's cost followed the bucket's size instead of what it returned.
    The index is built on a bucket's first listing; names put since are merged in (one C merge
    of two sorted runs) by the next listing, deletes leave it at once. The keys returned,
    common prefixes, ``StartAfter``, continuation tokens and page sizes are moto's."""
    from moto.s3.models import FakeDeleteMarker, FakeTableStorageBucket, S3Backend
    from moto.s3.utils import _VersionedKeyStore

    set_item, set_list, pop = (
        _VersionedKeyStore.__setitem__, _VersionedKeyStore.setlist, _VersionedKeyStore.pop,
    )  # fmt: skip

    def adding(store, key, setter, value) -> None:
        with _LOCK:
            new = not dict.__contains__(store, key)
            setter(store, key, value)
            if new and "_haproof_index" in store.__dict__:
                store.__dict__["_haproof_new"].add(key)

    def pop_key(self, key):
        with _LOCK:
            pop(self, key)
            self.__dict__.get("_haproof_new", set()).discard(key)
            idx = self.__dict__.get("_haproof_index")
            i = bisect.bisect_left(idx, key) if idx is not None else 0
            if idx is not None and i < len(idx) and idx[i] == key:
                del idx[i]

    _VersionedKeyStore.__setitem__ = lambda self, k, v: adding(self, k, set_item, v)
    _VersionedKeyStore.setlist = lambda self, k, v: adding(self, k, set_list, v)
    _VersionedKeyStore.pop = pop_key
    listing = S3Backend.list_objects_v2

    def list_objects_v2(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys):
        if isinstance(bucket, FakeTableStorageBucket):
            return listing(self, bucket, prefix, delimiter, continuation_token, start_after,
                           max_keys)  # fmt: skip
        after = (
            self._pagination_tokens.get(continuation_token) if continuation_token else start_after
        )
        out = _page(bucket, prefix or "", delimiter, after, max_keys, FakeDeleteMarker)
        return self._truncate_result(out, max_keys)

    S3Backend.list_objects_v2 = list_objects_v2
    global _INSTALLED
    _INSTALLED = True
