"""Resuming from the archive's tail: the same answer as reading every manifest, at a cost that
does not grow with the number of chunks archived."""

from __future__ import annotations

import bisect
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.archive.archive_tail import newest_snapshot_key, read_tail
from broker.archive.shipper import NodeIdentity, Shipper
from contracts import archive_layout as layout
from contracts.errors import ObjectNotFoundError
from contracts.object_store import open_store
from contracts.object_store.interface import ObjectInfo

C, B, N = "c1", "broker-a", "n0"
PREFIX = layout.node_prefix(C, B, N)


class MemoryStore:
    """An in-memory object store with S3's listing semantics, counting requests."""

    root = "mem://"

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.data: dict[str, bytes] = {}
        self.requests: Counter = Counter()

    def put(self, key: str, data: bytes, sha256: str | None = None) -> bool:
        self.requests["put"] += 1
        if key not in self.data:
            bisect.insort(self.keys, key)
        self.data[key] = data
        return True

    def get(self, key: str, max_bytes: int | None = None) -> bytes:
        self.requests["get"] += 1
        try:
            return self.data[key]
        except KeyError:
            raise ObjectNotFoundError(key) from None

    def list(self, prefix: str, start_after: str | None = None):
        self.requests["list"] += 1
        for key in self.keys[bisect.bisect_right(self.keys, start_after or "") :]:
            if key.startswith(prefix):
                self.requests["keys_listed"] += 1
                yield ObjectInfo(key, len(self.data[key]))

    def list_prefixes(self, prefix: str) -> list[str]:
        self.requests["list"] += 1
        return sorted(
            {
                prefix + k[len(prefix) :].split("/")[0] + "/"
                for k in self.keys
                if k.startswith(prefix) and "/" in k[len(prefix) :]
            }
        )


class Writer:
    """Writes what a node's shipper writes (manifests, events), with the shipper's rules:
    chunks in offset order, each epoch at or above the last, a truncation resumes at ``to``
    under an epoch above every chunk. Layout revision 1 (flat keys) while ``flat``."""

    def __init__(self, store) -> None:
        self.store, self.flat = store, False
        self.end, self.epoch, self.role, self.now_ms = 0, 0, "SYNC_MASTER", 1_000_000_000_000
        self.trunc_epoch = self.max_epoch = 0

    def _flat(self, key: str) -> str:
        if not self.flat:
            return key
        parts = key.split("/")
        return "/".join(parts[:5] + parts[-1:])

    def ship(self, n: int, size: int) -> None:
        for _ in range(n):
            self.now_ms += 70_000
            epoch = max(self.epoch, self.trunc_epoch)
            key = layout.chunk_key(C, B, N, self.end, self.end + size, epoch)
            man = layout.ChunkManifest(
                self.end,
                self.end + size,
                1,
                self.now_ms,
                self.now_ms,
                "0" * 64,
                N,
                0,
                self.role,
                epoch,
                self.now_ms,
                1 << 30,
            )
            self.store.put(self._flat(layout.manifest_key(key)), man.to_json())
            self.end += size
            self.max_epoch = max(self.max_epoch, epoch)

    def new_epoch(self, role: str) -> None:
        self.epoch, self.role = self.epoch + 1, role

    def event(self, kind: str, epoch: int, **fields) -> None:
        self.now_ms += 3_000_000_000  # a month: events cross time buckets
        doc = layout.make_event(kind, N, C, B, self.now_ms, epoch, **fields)
        key = layout.event_key(C, B, N, self.now_ms, kind)
        self.store.put(self._flat(key), layout.json_bytes(doc))

    def truncate(self, back: int, role: str) -> None:
        """``back`` > 0: archived bytes left the log (a new epoch above every chunk);
        ``back`` <= 0: the log was cut at or above the archive's end (the current epoch)."""
        if back > 0:
            if not self.end:
                return
            to = max(0, self.end - back)
            self.trunc_epoch = self.epoch = max(self.epoch + 1, self.max_epoch + 1)
            self.role = role
            self.event("truncated", self.trunc_epoch, **{"from": self.end, "to": to})
            self.end = to
        else:
            self.event("truncated", self.epoch, **{"from": self.end - back, "to": self.end - back})
            self.end = full_scan(self.store)[0] or 0  # where the node's archiver resumes


def full_scan(store) -> tuple[int | None, int, dict[int, str]]:
    """The answer read from every manifest and event (what start-up read before)."""
    mans = [
        layout.ChunkManifest.from_json(store.get(i.key))
        for i in store.list(PREFIX + layout.COMMITLOG)
        if (p := layout.parse_key(i.key)) is not None and p.kind == "manifest"
    ]
    roles: dict[int, str] = {}
    for m in mans:
        if m.role != "SLAVE":
            roles.setdefault(m.epoch, m.role)
    trunc = [i.key for i in store.list(PREFIX + layout.EVENTS) if i.key.endswith("-truncated.json")]
    max_epoch = max((m.epoch for m in mans), default=0)
    if not trunc:
        return max((m.end for m in mans), default=None), max_epoch, roles
    doc = layout.parse_event(store.get(trunc[-1]))
    counted = [m.end for m in mans if m.epoch >= doc["epoch"]]
    return max(counted, default=doc["to"]), max_epoch, roles


ROLE = st.sampled_from(layout.ROLES)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("ship"), st.integers(1, 6), st.sampled_from([7_000, 900_000, 3 << 20])),
        st.tuples(st.just("epoch"), ROLE),
        st.tuples(st.just("truncate"), st.integers(-5_000, 20_000_000), ROLE),
        st.tuples(st.just("event"), st.sampled_from(["started", "role_changed"])),
    ),
    max_size=14,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, flat_ops=st.integers(0, 14))
def test_the_tail_answers_what_every_manifest_answers(ops, flat_ops) -> None:
    store = MemoryStore()
    w = Writer(store)
    for i, op in enumerate(ops):
        w.flat = i < flat_ops  # an archive written by layout revision 1, then 2
        if op[0] == "ship":
            w.ship(op[1], op[2])
        elif op[0] == "epoch":
            w.new_epoch(op[1])
        elif op[0] == "truncate":
            w.truncate(op[1], op[2])
        else:
            w.event(op[1], w.epoch, **{"from": "SLAVE", "to": w.role})
    end, max_epoch, roles = full_scan(store)
    store.requests.clear()
    tail = read_tail(store, PREFIX)
    assert (tail.end, tail.max_chunk_epoch) == (end, max_epoch)
    assert all(roles.get(e) == r for e, r in tail.master_epochs.items())
    if max_epoch in roles:  # the epoch the archive ends in: its role is known
        assert tail.master_epochs.get(max_epoch) == roles[max_epoch]
    epochs = len({layout.parse_key(k).epoch for k in store.keys if "/commitlog/" in k})
    assert store.requests["get"] <= epochs + 1  # one manifest per epoch, one event


@pytest.mark.parametrize("regrown", [True, False])
def test_start_up_reads_a_few_objects_of_a_large_archive(tmp_path, regrown) -> None:
    """3,000 chunks over 4 epochs and a truncation, on file://: resuming reads the newest
    bucket folders and two objects, however many chunks lie behind them (``regrown``: the log
    grew past the cut chunks again; else the archive ends at the truncation point, with the
    cut chunks above it)."""
    store = open_store(f"file://{tmp_path}/a")
    w = Writer(store)
    for role in ("SLAVE", "SYNC_MASTER", "SLAVE"):
        w.new_epoch(role)
        w.ship(1000 if regrown else 1500, 64 << 20)
    w.truncate(200 << 20, "SYNC_MASTER")  # 4 chunks cut
    if regrown:
        w.ship(1000, 64 << 20)
    expected = full_scan(store)
    store.requests.clear()
    shipper = Shipper(store, NodeIdentity(C, B, N))
    assert shipper.archived_end() == expected[0] == w.end
    assert shipper.max_chunk_epoch == expected[1] == (4 if regrown else 3)
    assert shipper.truncation_epoch == 4
    assert shipper.master_epochs == ({4: "SYNC_MASTER"} if regrown else {})
    req = store.requests
    assert req["get"] == 2, req  # the newest manifest (of each epoch seen) and the event
    # the newest folders (the cut chunks and the one below them), not 3,000 keys
    assert req["keys_listed"] <= 6 and req["list"] <= 20, req


@settings(max_examples=100, deadline=None)
@given(
    times=st.lists(st.integers(0, 10**13 - 1), min_size=0, max_size=30, unique=True),
    flat=st.integers(0, 30),
)
def test_the_newest_snapshot_is_found_in_the_newest_time_bucket(times, flat) -> None:
    """Revision 1 wrote the oldest ``flat`` snapshots without bucket folders."""
    store = MemoryStore()
    times = sorted(times)
    for i, t in enumerate(times):
        key = layout.snapshot_key(C, B, N, t)
        if i < flat:
            key = "/".join(key.split("/")[:5] + key.split("/")[-1:])
        store.put(key, b"{}")
    store.requests.clear()
    key = newest_snapshot_key(store, PREFIX)
    assert key == (None if not times else [k for k in store.keys if "/snapshots/" in k][-1])
    if times and flat < len(times):  # a bucketed one: the newest folders only
        assert store.requests["keys_listed"] <= len(times) and store.requests["list"] <= 4
        assert key.endswith(f"/{times[-1]:013d}.json")


def test_shipper_reads_the_newest_snapshot_of_many(tmp_path) -> None:
    store = open_store(f"file://{tmp_path}")
    shipper = Shipper(store, NodeIdentity(C, B, N))
    for i in range(200):
        at = 1_700_000_000_000 + i * 3_600_000
        shipper.put_snapshot(layout.Snapshot(N, B, 0, "SYNC_MASTER", 0, at, i, i, i))
    store.requests.clear()
    snap = shipper.latest_snapshot()
    assert snap is not None and snap.maxPhyOffset == 199
    assert store.requests["get"] == 1 and store.requests["keys_listed"] <= 28, store.requests
