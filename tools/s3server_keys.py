"""Lean moto keys: the embedded S3 server's per-object memory (a moto patch that runs in the
server process; see ``tools/s3server.py``).

Where moto's ~3.6 KB per small object went (tracemalloc, 20k PUTs of 240 bytes through the
backend, Python 3.11), besides the object's name and bytes:

- ~1.6 KB: the key's attribute dict. A ``FakeKey`` sets 35 attributes; past 30 (CPython 3.11's
  limit for attributes kept in a compact array shared by all instances of a class) each key
  gets a dict of its own, resized to 64 slots. Most of those attributes hold the same value on
  every key (``None`` for encryption, locks, redirects, checksums; ``"STANDARD"``; the restore
  state machine's transitions, a fresh list per key; the account, region, partition and buffer
  size). :class:`_Usual` keeps such an attribute on the key only where it differs, so the key
  stays under 30 and uses the compact array (~0.3 KB).
- ~0.6 KB: a private canned ACL (``FakeAcl``, ``FakeGrant``, ``FakeGrantee`` and lists) built
  for every key, and kept alive for ever by moto's instance tracking even after a PUT replaces
  it with the bucket's ACL (as every PUT over HTTP does). ACL objects are never changed in
  place (``set_acl`` replaces them), so one private canned ACL serves every key.
- ~0.6 KB: the ``SpooledTemporaryFile`` holding the bytes (the wrapper, its settings dict and
  its ``BytesIO``). An object held in memory (up to ``KEY_BUFFER_BYTES``) gets a bare
  ``BytesIO`` made from the request's bytes (sharing their memory); a larger one gets moto's
  spooled file as before (``tools/s3server_writes.py``, :func:`store_bodies_without_copies`).
- ~0.2 KB: the names of its metadata (``content-type``, ``x-amz-meta-sha256``...), lowercased
  into a fresh string per key by moto's ``LowercaseDict``: interned, one string per name.
- ~0.1 KB: a ``threading.Lock`` per key, which guards a seek and a read of the key's buffer.
  One process-wide ``RLock`` guards them all: the same exclusion (wider), and the copies it
  serialises hold the GIL anyway.

What moto answers is unchanged: each attribute reads as moto set it (ETag, Last-Modified, size,
ranges, metadata, ACLs; ``tests/archive/test_s3server_preload.py`` compares answers).
"""

from __future__ import annotations

import sys
import threading

_MISSING = object()
TRANSITIONS = [(None, "IN_PROGRESS"), ("IN_PROGRESS", "RESTORED")]  # moto's, for a key's restore


class _Usual:
    """A ``FakeKey`` attribute kept on the key (under another name) only when it differs from
    its usual value; read, it is the value last set, as a plain attribute."""

    def __init__(self, usual):
        self.usual = usual

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_lean_" + name

    def __get__(self, key, owner=None):
        if key is None:
            return self
        return getattr(key, self.slot, self.usual)

    def __set__(self, key, value) -> None:
        usual = self.usual
        if value is usual or (type(value) is type(usual) and value == usual):
            if getattr(key, self.slot, _MISSING) is not _MISSING:  # no exception when absent
                delattr(key, self.slot)
        else:
            setattr(key, self.slot, value)


class _SharedLock:
    """``key.lock``: one reentrant lock for every key's buffer; a lock set on a key (moto's
    ``__init__`` and ``__setstate__`` make one each) is dropped."""

    lock = threading.RLock()

    def __get__(self, key, owner=None):
        return self if key is None else self.lock

    def __set__(self, key, value) -> None:
        pass


def usual_values() -> dict[str, object]:
    """The attributes of a ``FakeKey`` that hold the same value on nearly every key."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.settings import get_s3_default_key_buffer_size

    usual: dict[str, object] = {
        "_transitions": TRANSITIONS,
        "_status": None,
        "_tick": 0,
        "model_name": "s3::keyrestore",
    }
    usual.update(
        # moto's S3 backend is one per partition, and gives its keys the partition as region
        account_id=DEFAULT_ACCOUNT_ID,
        region_name="aws",
        partition="aws",
        _max_buffer_size=get_s3_default_key_buffer_size(),
        website_redirect_location=None,
        checksum_algorithm=None,
        _storage_class="STANDARD",
        _expiry=None,
        _version_id="null",
        _is_versioned=False,
        multipart=None,
        disposed=False,
        encryption=None,
        kms_key_id=None,
        bucket_key_enabled=None,
        lock_mode=None,
        lock_legal_status=None,
        lock_until=None,
        checksum_value=None,
        checksum_type=None,
        checksum_parts=None,
    )
    return usual


def _state(key) -> dict:
    """``FakeKey.__getstate__`` (pickling, ``copy.deepcopy`` in ListObjectVersions) as moto's:
    the attributes the key holds and its bytes as ``value``, without the buffer and lock."""
    state = dict(key.__dict__)
    try:
        state["value"] = key.value
    except ValueError:  # the buffer is closed: the key was deleted
        state["value"] = ""
    state.pop("_value_buffer", None)
    state.pop("lock", None)
    return state


def keep_keys_lean() -> None:
    """Patch moto, in the server process, as the module docstring says."""
    from moto.s3 import models
    from moto.utilities.utils import LowercaseDict

    for name, usual in usual_values().items():
        descriptor = _Usual(usual)
        descriptor.__set_name__(models.FakeKey, name)
        setattr(models.FakeKey, name, descriptor)
    models.FakeKey.lock = _SharedLock()
    models.FakeKey.__getstate__ = _state  # moto's deletes a "lock" its keys no longer hold
    canned = models.get_canned_acl
    private = canned("private")

    def get_canned_acl(acl: str):
        return private if acl == "private" else canned(acl)

    models.get_canned_acl = get_canned_acl
    LowercaseDict._keytransform = lambda self, key: sys.intern(key.lower())
