"""Reading the archive: the driver lists keys and small JSON; executors read byte ranges.

The driver never downloads commit log bytes: it builds a table of chunks (key, node, range,
epoch) and hands it to Spark tasks, which re-open the store from a picklable ``StoreSpec`` and
read their ranges.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from broker.archive import layout
from broker.archive.object_store import ObjectStore, StoreSpec
from broker.errors import AuditInputError, ObjectNotFoundError


@dataclass
class NodeArchive:
    node: str
    chunks: list[dict] = field(default_factory=list)  # manifest fields + "key"
    orphans: list[str] = field(default_factory=list)  # .log keys without a manifest
    snapshots: list[layout.Snapshot] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    snapshot_keys: list[str] = field(default_factory=list)  # sorted, as listed
    event_keys: list[str] = field(default_factory=list)

    @property
    def end(self) -> int:
        return max((c["end"] for c in self.chunks), default=0)

    @property
    def start(self) -> int:
        return min((c["start"] for c in self.chunks), default=0)

    def role_at_end(self) -> str | None:
        if self.snapshots:
            return self.snapshots[-1].role
        if self.chunks:
            return self.chunks[-1]["role"]
        return None

    @property
    def mapped_file_size(self) -> int:
        for c in self.chunks:
            return c["mappedFileSize"]
        for s in self.snapshots:
            return s.mappedFileSize
        return 1 << 30


@dataclass
class GroupArchive:
    cluster: str
    broker_name: str
    nodes: dict[str, NodeArchive]
    # the master an earlier run's state names, for a run that lists nothing telling it
    master_hint: str = ""
    incremental_listing: bool = False  # listed from per-node marks, not in full


def list_broker_names(store: ObjectStore, cluster: str) -> list[str]:
    """The groups of a cluster by one delimiter listing (never a walk of their objects)."""
    prefix = layout.cluster_prefix(cluster)
    names = [p[len(prefix) :].rstrip("/") for p in store.list_prefixes(prefix)]
    names = [n for n in names if _is_name(n)]
    if not names:
        raise AuditInputError(f"no archive for cluster {cluster!r} under {store.root}")
    return names


def list_nodes(store: ObjectStore, cluster: str, broker_name: str) -> list[str]:
    prefix = layout.group_prefix(cluster, broker_name)
    names = [p[len(prefix) :].rstrip("/") for p in store.list_prefixes(prefix)]
    return [n for n in names if _is_name(n)]


def _is_name(name: str) -> bool:
    try:
        layout.check_name("name", name)
    except layout.LayoutError:
        return False
    return True


NODE_FOLDERS = ("commitlog/", "snapshots/", "events/")


def _after(mark, folder: str) -> str | None:
    if mark is None:
        return None
    return {
        "commitlog/": mark.commitlog_after,
        "snapshots/": mark.last_snapshot,
        "events/": mark.last_event,
    }[folder] or None


def list_group_keys(store: ObjectStore, cluster: str, broker_name: str, marks, nodes) -> list[str]:
    """Keys of one group: every key (``marks`` None), or per node and folder only the keys after
    that node's marks (requests in proportion to what is new, plus three per node)."""
    if marks is None:
        return [o.key for o in store.list(layout.group_prefix(cluster, broker_name))]
    jobs = []
    for node in nodes:
        base = layout.node_prefix(cluster, broker_name, node)
        for folder in NODE_FOLDERS:
            jobs.append((base + folder, _after(marks.get(node), folder)))
    pages = io_pool().map(lambda j: [o.key for o in store.list(j[0], start_after=j[1])], jobs)
    return [k for page in pages for k in page]


def load_group(
    store: ObjectStore,
    cluster: str,
    broker_name: str,
    marks: dict | Callable[[], dict | None] | None = None,
    master_hint: str = "",
) -> GroupArchive:
    """The chunks (manifests), snapshots and events of one group: all of them, or with
    ``marks`` (per node :class:`spark_jobs.incremental.NodeMark`, or a callable returning
    them) only those listed after each node's marks. A new ``truncated`` event sends the run
    back to a full listing: the truncated node's new chunks start below its old ones."""
    marks = marks() if callable(marks) else marks
    nodes = list_nodes(store, cluster, broker_name) if marks is not None else []
    keys = list_group_keys(store, cluster, broker_name, marks, nodes)
    ga = _read_group(store, cluster, broker_name, keys, marks is not None)
    if marks is not None:
        if any(
            layout.parse_key(k).event_kind == "truncated"
            and k > getattr(marks.get(node), "events_seen", "")
            for node, na in ga.nodes.items()
            for k in na.event_keys
        ):  # a truncation no passing run has seen
            return load_group(store, cluster, broker_name, None, master_hint)
        for node in nodes:
            ga.nodes.setdefault(node, NodeArchive(node))
    ga.master_hint = master_hint
    if not ga.nodes:
        raise AuditInputError(f"no archive for {cluster}/{broker_name} under {store.root}")
    return ga


def _read_group(store, cluster: str, broker_name: str, keys: list[str], partial: bool):
    nodes: dict[str, NodeArchive] = {}
    logs: dict[str, str] = {}
    small: list[tuple] = []  # (parsed key, key) of the JSON objects to read
    for key in keys:
        parsed = layout.parse_key(key)
        if parsed is None or parsed.kind == "audit_state":
            continue
        nodes.setdefault(parsed.node, NodeArchive(parsed.node))
        if parsed.kind == "chunk":
            logs[key] = parsed.node
        elif parsed.kind in ("manifest", "snapshot", "event"):
            small.append((parsed, key))
    # the small JSON objects are read concurrently (one request each)
    fetched = io_pool().map(store.get, [key for _parsed, key in small])
    for (parsed, key), body in zip(small, fetched, strict=True):
        na = nodes[parsed.node]
        if parsed.kind == "manifest":
            try:
                man = layout.ChunkManifest.from_json(body, what=key)
            except (layout.LayoutError, ValueError) as exc:
                raise AuditInputError(f"unreadable manifest {key}: {exc}") from exc
            doc = {f: getattr(man, f) for f in man.__dataclass_fields__}
            doc["key"] = layout.chunk_key(
                cluster, broker_name, parsed.node, man.start, man.end, man.epoch
            )
            na.chunks.append(doc)
        elif parsed.kind == "snapshot":
            na.snapshots.append(layout.Snapshot.from_json(body, what=key))
            na.snapshot_keys.append(key)
        else:
            na.events.append(layout.parse_event(body, what=key))
            na.event_keys.append(key)
    for na in nodes.values():
        keys_of = {c["key"] for c in na.chunks}
        na.orphans = sorted(k for k, n in logs.items() if n == na.node and k not in keys_of)
        na.chunks.sort(key=lambda c: (c["start"], c["epoch"]))
        na.snapshots.sort(key=lambda s: s.takenAt)
        na.events.sort(key=lambda e: e["at"])
        na.snapshot_keys.sort()
        na.event_keys.sort()
    return GroupArchive(cluster, broker_name, nodes, incremental_listing=partial)


def read_log_range(store: ObjectStore, segments: list[dict], start: int, end: int) -> bytes | None:
    """Bytes [start, end) of one node's log by range reads; None where the segments leave a hole.

    A segment is ``{"start", "end", "key"}`` plus ``"kstart"``, the log offset of the object's
    first byte when the segment is only part of its chunk (default: ``start``).
    """
    out = []
    pos = start
    for s in segments:
        if s["end"] <= pos or s["start"] >= end:
            continue
        if s["start"] > pos:
            return None  # a hole
        base = s.get("kstart", s["start"])
        hi = min(end, s["end"])
        try:
            out.append(store.get_range(s["key"], pos - base, hi - base))
        except ObjectNotFoundError:
            return None
        pos = hi
        if pos >= end:
            break
    if pos < end:
        return None
    return b"".join(out)


def spec_of(store: ObjectStore, spec: StoreSpec | None) -> StoreSpec:
    return spec if spec is not None else StoreSpec(store.root)


_EXECUTOR_STORES: dict[bytes, ObjectStore] = {}


_IO_POOL: ThreadPoolExecutor | None = None
_IO_POOL_LOCK = threading.Lock()


def io_pool() -> ThreadPoolExecutor:
    """The driver's threads for small object-store requests (listing-time reads, outputs),
    kept for the life of the process: a nightly incremental run with nothing new is a handful
    of such requests, and starting fresh threads for each run cost a fifth of it. Tasks given
    to it never wait on one another."""
    global _IO_POOL
    with _IO_POOL_LOCK:
        if _IO_POOL is None:
            _IO_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="haproof-io")
        return _IO_POOL


def executor_store(spec: StoreSpec) -> ObjectStore:
    """The store for ``spec``, opened once per Python worker and reused by its later tasks
    (opening an S3 client costs ~0.15 s; Spark reuses Python workers between tasks).

    Keyed by the pickled spec, which stays in this process's memory and is never logged."""
    key = pickle.dumps(spec)
    store = _EXECUTOR_STORES.get(key)
    if store is None:
        store = _EXECUTOR_STORES[key] = spec.open()
    return store
