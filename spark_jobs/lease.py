"""One audit of a group at a time: the lease ``ROOT/v1/{cluster}/{brokerName}/_audit/lease.json``
beside ``_audit/state.json`` (key: ``contracts.audit_state.audit_lease_key``).

An audit takes the lease of each group it audits before it reads the group's state, and keeps
it until its outputs and state are written. The lease is a small JSON document::

    {"holder": runId, "owner": "host:pid", "nonce": hex, "acquiredAt": ms, "renewedAt": ms,
     "expiresAt": ms, "ttlMs": ms, "released": false}

written only by conditional writes of the object store (``create`` when absent, ``replace``
only of the version read: S3 ``If-None-Match``/``If-Match``, a hard link and a locked compare on
file://), so of two audits racing for it exactly one wins. The holder renews it every third of
its time to live (:class:`GroupLeases`, a thread); an audit whose process died stops renewing,
and once ``expiresAt`` has passed the next audit takes the lease over (logging whom from). An
audit that could not renew (its lease was taken over after it stalled past the expiry) must not
write the group's state: :meth:`GroupLeases.check` raises :class:`LeaseLostError` before it
does. A released lease (``released``: the run ended) is free at once.

An audit that finds the lease held waits up to ``wait_s`` for it, then gives up with
:class:`LeaseBusyError`, which names the run holding it (``haproof audit`` exits 3).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from contracts.audit_state import audit_lease_key
from contracts.errors import ConditionFailedError, HaproofError, ObjectNotFoundError

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 120.0
#: how often a waiting audit looks at a held lease again (at most)
POLL_S = 1.0
LEASE_MAX_BYTES = 4096


class LeaseBusyError(HaproofError):
    """Another audit holds the group's lease (``haproof audit`` exit status 3)."""

    def __init__(self, key: str, holder: str, owner: str, expires_at_ms: int) -> None:
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at_ms / 1000))
        super().__init__(
            f"{key}: another audit holds this group: run {holder} ({owner}), lease until "
            f"{until} unless renewed"
        )
        self.key, self.holder, self.owner, self.expires_at_ms = key, holder, owner, expires_at_ms


class LeaseLostError(HaproofError):
    """The lease was taken over while this audit held it (it stalled past the expiry)."""


@dataclass
class Lease:
    """One held lease: the version written last (``token``) and its document."""

    store: object
    key: str
    doc: dict
    token: str

    @property
    def holder(self) -> str:
        return self.doc["holder"]


def _now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)


def _parse(data: bytes, key: str) -> dict | None:
    """The lease document, or None when unreadable (then it is treated as expired)."""
    if len(data) > LEASE_MAX_BYTES:
        return None
    try:
        doc = json.loads(data)
        int(doc["expiresAt"]), str(doc["holder"])
    except (ValueError, TypeError, KeyError):
        log.warning("%s is not a lease document; taking it over", key)
        return None
    return doc if isinstance(doc, dict) else None


def _doc(holder: str, ttl_ms: int, now_ms: int, nonce: str, acquired_at: int) -> dict:
    return {
        "holder": holder,
        "owner": f"{socket.gethostname()}:{os.getpid()}",
        "nonce": nonce,
        "acquiredAt": acquired_at,
        "renewedAt": now_ms,
        "expiresAt": now_ms + ttl_ms,
        "ttlMs": ttl_ms,
        "released": False,
    }


def _encode(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True).encode()


def try_acquire(
    store, key: str, holder: str, ttl_ms: int, clock: Callable[[], float] = time.time
) -> Lease | dict:
    """One attempt: the :class:`Lease` when taken (absent, released or expired), else the
    document of the lease that holds it."""
    nonce = os.urandom(8).hex()
    now = _now_ms(clock)
    doc = _doc(holder, ttl_ms, now, nonce, now)
    try:
        return Lease(store, key, doc, store.create(key, _encode(doc)))
    except ConditionFailedError:
        pass
    try:
        data, token = store.get_versioned(key)
    except ObjectNotFoundError:
        return try_acquire(store, key, holder, ttl_ms, clock)  # released and removed meanwhile
    held = _parse(data, key)
    if held is not None and held.get("nonce") == nonce:  # our create went through on a retry
        return Lease(store, key, held, token)
    if held is not None and not held.get("released") and int(held["expiresAt"]) > now:
        return held
    try:
        token = store.replace(key, _encode(doc), token)
    except ConditionFailedError:
        return try_acquire(store, key, holder, ttl_ms, clock)  # someone else changed it first
    if held is not None and not held.get("released"):
        log.warning(
            "%s: took over the expired lease of run %s (%s)", key, held["holder"], held.get("owner")
        )
    return Lease(store, key, doc, token)


def acquire(
    store,
    key: str,
    holder: str,
    *,
    ttl_s: float = DEFAULT_TTL_S,
    wait_s: float = 0.0,
    clock: Callable[[], float] = time.time,
    wait: Callable[[float], object] = time.sleep,
) -> Lease:
    """Take the lease, waiting up to ``wait_s`` while another audit holds it; else
    :class:`LeaseBusyError`."""
    deadline = clock() + wait_s
    while True:
        got = try_acquire(store, key, holder, int(ttl_s * 1000), clock)
        if isinstance(got, Lease):
            return got
        left = deadline - clock()
        if left <= 0:
            raise LeaseBusyError(key, got["holder"], str(got.get("owner")), int(got["expiresAt"]))
        wait(min(POLL_S, left, max(0.05, int(got["expiresAt"]) / 1000 - clock())))


def renew(lease: Lease, clock: Callable[[], float] = time.time) -> None:
    """Move the expiry a time to live ahead; :class:`LeaseLostError` when it was taken over."""
    doc = dict(lease.doc, renewedAt=_now_ms(clock), expiresAt=_now_ms(clock) + lease.doc["ttlMs"])
    try:
        lease.token = lease.store.replace(lease.key, _encode(doc), lease.token)
    except ConditionFailedError as exc:
        raise LeaseLostError(f"{lease.key}: run {lease.holder} lost its lease: {exc}") from exc
    lease.doc = doc


def release(lease: Lease, clock: Callable[[], float] = time.time) -> None:
    """Mark the lease free (a lost lease is left to its new holder)."""
    doc = dict(lease.doc, released=True, expiresAt=_now_ms(clock), renewedAt=_now_ms(clock))
    try:
        lease.token = lease.store.replace(lease.key, _encode(doc), lease.token)
        lease.doc = doc
    except ConditionFailedError:
        log.warning(
            "%s: lease of run %s was taken over before its release", lease.key, lease.holder
        )


class GroupLeases:
    """The leases of the groups one audit covers, taken in name order (two audits of several
    groups cannot each wait on the other), renewed by a thread, released on exit."""

    def __init__(
        self,
        store,
        cluster: str,
        groups: list[str],
        holder: str,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        wait_s: float = 0.0,
    ) -> None:
        self.store, self.holder, self.ttl_s, self.wait_s = store, holder, ttl_s, wait_s
        self.keys = {g: audit_lease_key(cluster, g) for g in sorted(set(groups))}
        self.leases: dict[str, Lease] = {}
        self.lost: dict[str, LeaseLostError] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._renew_loop, name="audit-lease", daemon=True)

    def __enter__(self) -> GroupLeases:
        try:
            for group, key in self.keys.items():
                self.leases[group] = acquire(
                    self.store, key, self.holder, ttl_s=self.ttl_s, wait_s=self.wait_s
                )
                log.info("%s: lease taken by run %s", key, self.holder)
        except BaseException:
            self._release_all()
            raise
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.ttl_s)
        self._release_all()

    def release_now(self) -> None:
        """From a signal handler: stop renewing and release what is held (waits at most a few
        seconds for a renewal in flight)."""
        self._stop.set()
        if self._lock.acquire(timeout=5):
            try:
                for group, lease in self.leases.items():
                    if group not in self.lost:
                        release(lease)
                self.leases = {}
            finally:
                self._lock.release()

    def _release_all(self) -> None:
        with self._lock:
            for group, lease in self.leases.items():
                if group not in self.lost:
                    release(lease)
            self.leases = {}

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            with self._lock:
                for group, lease in self.leases.items():
                    if group in self.lost:
                        continue
                    try:
                        renew(lease)
                    except LeaseLostError as exc:
                        self.lost[group] = exc
                        log.error("%s", exc)
                    except HaproofError as exc:  # the store failed: try again next round
                        log.warning("%s: renewal failed, retrying: %s", lease.key, exc)

    def check(self, group: str) -> None:
        """Before writing ``group``'s state: :class:`LeaseLostError` if the lease was lost, or
        would expire before a renewal could land (a stalled process)."""
        with self._lock:
            if group in self.lost:
                raise self.lost[group]
            lease = self.leases.get(group)
            if lease is None:
                raise LeaseLostError(f"run {self.holder} holds no lease of {group}")
            renew(lease)  # proves it is still ours, and gives the write a full time to live
