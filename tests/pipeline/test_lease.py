"""The audit lease (spark_jobs/lease.py) over the object stores' conditional writes: on file://
and on the embedded S3 server (a real moto subprocess), races between real threads, expiry and
take-over driven by an injected clock."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from contracts.audit_state import audit_lease_key
from contracts.errors import ConditionFailedError
from contracts.object_store import open_store
from spark_jobs import lease as L

KEY = audit_lease_key("c", "broker-a")


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path):
    if request.param == "file":
        return open_store(f"file://{tmp_path}/root")
    server = request.getfixturevalue("s3_server")
    bucket = f"lease-{uuid.uuid4().hex[:10]}"
    server.create_bucket(bucket)
    return open_store(f"s3://{bucket}/p", **server.store_options())


class Clock:
    def __init__(self, t: float = 1_800_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def test_conditional_writes(store):
    token = store.create("k/lease.json", b"one")
    with pytest.raises(ConditionFailedError):
        store.create("k/lease.json", b"two")
    assert store.get_versioned("k/lease.json") == (b"one", token)
    token2 = store.replace("k/lease.json", b"two", token)
    with pytest.raises(ConditionFailedError):  # the version read is gone
        store.replace("k/lease.json", b"three", token)
    assert store.get_versioned("k/lease.json") == (b"two", token2)
    with pytest.raises(ConditionFailedError):
        store.replace("k/absent.json", b"x", token2)


@pytest.mark.parametrize("op", ["create", "replace"])
def test_of_racing_writers_exactly_one_wins(store, op):
    """Eight threads, released together, write the same key conditionally: one wins."""
    token = store.create("race.json", b"base") if op == "replace" else None
    start, wins, losses = threading.Barrier(8), [], []

    def writer(i: int) -> None:
        start.wait()
        try:
            if op == "create":
                store.create("race.json", b"w%d" % i)
            else:
                store.replace("race.json", b"w%d" % i, token)
            wins.append(i)
        except ConditionFailedError:
            losses.append(i)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(wins) == 1 and len(losses) == 7
    assert store.get("race.json") == b"w%d" % wins[0]


def test_a_held_lease_is_busy_naming_its_holder_until_it_expires(store):
    clock = Clock()
    a = L.acquire(store, KEY, "run-A", ttl_s=60, clock=clock)
    with pytest.raises(L.LeaseBusyError, match="another audit holds this group: run run-A") as e:
        L.acquire(store, KEY, "run-B", ttl_s=60, clock=clock)
    assert e.value.holder == "run-A" and e.value.expires_at_ms == int((clock.t + 60) * 1000)
    clock.t += 59
    L.renew(a, clock=clock)  # renewed: another time to live from now
    clock.t += 59
    with pytest.raises(L.LeaseBusyError):
        L.acquire(store, KEY, "run-B", ttl_s=60, clock=clock)
    clock.t += 2  # past the expiry: A stalled; B takes over
    b = L.acquire(store, KEY, "run-B", ttl_s=60, clock=clock)
    assert json.loads(store.get(KEY))["holder"] == "run-B"
    with pytest.raises(L.LeaseLostError, match="run run-A lost its lease"):
        L.renew(a, clock=clock)
    L.release(a, clock=clock)  # a lost lease is left alone
    assert json.loads(store.get(KEY))["holder"] == "run-B"
    L.release(b, clock=clock)
    c = L.acquire(store, KEY, "run-C", ttl_s=60, clock=clock)  # released: free at once
    assert c.doc["acquiredAt"] == int(clock.t * 1000)


def test_a_waiting_audit_gets_the_lease_when_it_is_released(store):
    clock = Clock()
    a = L.acquire(store, KEY, "run-A", ttl_s=60, clock=clock)
    waits = []

    def wait(s: float) -> None:  # the holder finishes while B waits
        waits.append(s)
        clock.t += s
        if len(waits) == 3:
            L.release(a, clock=clock)

    b = L.acquire(store, KEY, "run-B", ttl_s=60, wait_s=30, clock=clock, wait=wait)
    assert b.holder == "run-B" and len(waits) == 3 and all(w <= L.POLL_S for w in waits)
    with pytest.raises(L.LeaseBusyError, match="run run-B"):
        L.acquire(store, KEY, "run-C", ttl_s=60, wait_s=5, clock=clock, wait=clock.advance)


def test_an_unreadable_lease_is_taken_over(store):
    store.put_mutable(KEY, b"not json")
    lease = L.acquire(store, KEY, "run-A", ttl_s=60)
    assert json.loads(store.get(KEY))["holder"] == "run-A" == lease.holder


def test_group_leases_check_before_the_state_is_written(store, tmp_path):
    with L.GroupLeases(store, "c", ["broker-b", "broker-a"], "run-A", ttl_s=30) as held:
        assert list(held.leases) == ["broker-a", "broker-b"]
        held.check("broker-a")
        # B takes broker-b over (as after A stalled past its expiry)
        doc, token = store.get_versioned(audit_lease_key("c", "broker-b"))
        store.replace(audit_lease_key("c", "broker-b"), b'{"holder": "run-B"}', token)
        with pytest.raises(L.LeaseLostError):
            held.check("broker-b")
        with pytest.raises(L.LeaseBusyError):
            L.acquire(store, audit_lease_key("c", "broker-a"), "run-C", ttl_s=30)
    assert json.loads(store.get(audit_lease_key("c", "broker-a")))["released"] is True
    assert json.loads(store.get(audit_lease_key("c", "broker-b"))) == {"holder": "run-B"}
