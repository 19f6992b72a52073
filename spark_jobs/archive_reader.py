"""Reading the archive: the driver lists keys and small JSON; executors read byte ranges.

The driver never downloads commit log bytes: it builds a table of chunks (key, node, range,
epoch) and hands it to Spark tasks, which re-open the store from a picklable ``StoreSpec`` and
read their ranges.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from contracts import archive_layout as layout
from contracts import audit_tables as T
from contracts.errors import ArchiveError, AuditInputError, ObjectNotFoundError
from contracts.object_store import ObjectInfo, ObjectStore, StoreSpec
from contracts.read_limits import MAX_JSON_DOC_BYTES, load_json_doc


@dataclass
class NodeArchive:
    node: str
    chunks: list[dict] = field(default_factory=list)  # manifest fields + "key"
    orphans: list[str] = field(default_factory=list)  # .log keys without a manifest
    snapshots: list[layout.Snapshot] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    snapshot_keys: list[str] = field(default_factory=list)  # sorted, as listed
    event_keys: list[str] = field(default_factory=list)
    _snapshot_names: dict[int, str] = field(default_factory=dict, repr=False)

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

    def snapshot_name(self, taken_at: int) -> str:
        """The key, below its group's prefix, of this node's snapshot taken at ``taken_at`` as
        it was listed (bucketed or flat); the layout's name if that snapshot was not listed."""
        if len(self._snapshot_names) != len(self.snapshot_keys):
            self._snapshot_names = {}
            for key in self.snapshot_keys:
                named = layout.parse_key(key)
                if named is not None and named.at_ms is not None:
                    self._snapshot_names[named.at_ms] = key.split("/", 3)[3]  # past the group
        return self._snapshot_names.get(taken_at) or layout.snapshot_name(self.node, taken_at)

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
    #: archive faults found while listing and reading the JSON objects (``archive_faults`` rows)
    faults: list[dict] = field(default_factory=list)
    #: JSON documents read and parsed without a fault (evidence of the archive check)
    docs_read: int = 0
    # the master an earlier run's state names, for a run that lists nothing telling it
    master_hint: str = ""
    incremental_listing: bool = False  # listed from per-node marks, not in full

    def snapshot_name(self, node: str, taken_at: int) -> str:
        """How findings name a snapshot: its key below the group, as listed."""
        na = self.nodes.get(node)
        return na.snapshot_name(taken_at) if na else layout.snapshot_name(node, taken_at)


def fault(node: str, key: str, kind: str, detail: str, start=None, end=None) -> dict:
    """One ``archive_faults`` row (contracts.audit_tables)."""
    return {"node": node, "key": key, "kind": kind, "start": start, "end": end, "detail": detail}


def _fetch(store: ObjectStore, key: str) -> bytes | Exception:
    """The object's bytes, or the error that kept it from being read (a finding, not a crash)."""
    try:
        return store.get(key, MAX_JSON_DOC_BYTES)
    except ArchiveError as exc:
        return exc


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


def _after(mark, folder: str) -> str | None:
    if mark is None:
        return None
    return {
        layout.COMMITLOG: mark.commitlog_after,
        layout.SNAPSHOTS: mark.last_snapshot,
        layout.EVENTS: mark.last_event,
    }[folder] or None


def list_group_keys(
    store: ObjectStore, cluster: str, broker_name: str, marks, nodes
) -> Iterable[ObjectInfo]:
    """Objects of one group (key, size): all of them (``marks`` None: streamed, never held as
    one list), or per node and folder only those after that node's marks (requests in
    proportion to what is new, plus three per node)."""
    if marks is None:
        return store.list(layout.group_prefix(cluster, broker_name))
    jobs = []
    for node in nodes:
        base = layout.node_prefix(cluster, broker_name, node)
        for folder in layout.NODE_FOLDERS:
            jobs.append((base + folder, _after(marks.get(node), folder)))
    pages = io_pool().map(lambda j: list(store.list(j[0], start_after=j[1])), jobs)
    return [o for page in pages for o in page]


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


def _read_group(store, cluster: str, broker_name: str, listed, partial: bool) -> GroupArchive:
    """The group from its listed objects: manifests, snapshots and events read and parsed;
    every object that cannot be (absent, unreadable, not JSON, lacking fields, a .log without
    its manifest or of another size than its manifest says) is an archive fault, not a crash."""
    nodes: dict[str, NodeArchive] = {}
    logs: dict[str, tuple[str, int]] = {}  # .log key -> (node, listed size)
    small: list[tuple] = []  # (node, kind, key) of the JSON objects to read
    faults: list[dict] = []
    for info in listed:
        parsed = layout.parse_key(info.key)
        if parsed is None and layout.in_node_folder(info.key):
            # a misplaced bucket, a stray file: never out of the audit's view without a word
            faults.append(
                fault(
                    info.key.split("/")[3],
                    info.key,
                    T.FAULT_UNKNOWN_KEY,
                    "a key archive layout v1 does not name",
                )
            )
            continue
        if parsed is None or parsed.kind == "audit_state":
            continue
        nodes.setdefault(parsed.node, NodeArchive(parsed.node))
        if parsed.kind == "chunk":
            logs[info.key] = (parsed.node, info.size)
        elif parsed.kind in ("manifest", "snapshot", "event"):
            small.append((parsed.node, parsed.kind, info.key))
    # the small JSON objects are read concurrently (one request each), a bounded batch at a
    # time, and each is parsed as it arrives: the driver never holds the bytes (or the parsed
    # JSON) of every object of a year's archive at once
    docs_read = 0
    for batch in _batches(small, FETCH_BATCH):
        bodies = io_pool().map(lambda item: _fetch(store, item[2]), batch)
        for (node, kind, key), body in zip(batch, bodies, strict=True):
            docs_read += _parse_small(nodes[node], kind, key, body, faults, cluster, broker_name)
    del small
    for na in nodes.values():
        _match_logs(na, logs, faults)
        na.chunks.sort(key=lambda c: (c["start"], c["epoch"]))
        na.snapshots.sort(key=lambda s: s.takenAt)
        na.events.sort(key=lambda e: e["at"])
        na.snapshot_keys.sort()
        na.event_keys.sort()
    return GroupArchive(cluster, broker_name, nodes, faults, docs_read, incremental_listing=partial)


def _match_logs(na: NodeArchive, logs: dict[str, tuple[str, int]], faults: list[dict]) -> None:
    """One node's manifests against its listed .log objects: a .log without its manifest is an
    orphan, a manifest's .log absent or of another size is marked and a fault."""
    keys = {c["key"] for c in na.chunks}
    na.orphans = sorted(k for k, (n, _size) in logs.items() if n == na.node and k not in keys)
    for k in na.orphans:
        pk = layout.parse_key(k)
        faults.append(
            fault(
                na.node,
                k,
                T.FAULT_MANIFEST_MISSING,
                "a .log object without its manifest",
                pk.start,
                pk.end,
            )
        )
    for c in na.chunks:
        listed = logs.get(c["key"])
        want = c["end"] - c["start"]
        if listed is None:
            c["absent"] = True
            faults.append(
                fault(
                    na.node,
                    c["key"],
                    T.FAULT_LOG_MISSING,
                    f"manifest says [{c['start']}, {c['end']}) but the .log object is absent",
                    c["start"],
                    c["end"],
                )
            )
        elif listed[1] != want:
            c["size_mismatch"] = True
            word = "shorter" if listed[1] < want else "longer"
            faults.append(
                fault(
                    na.node,
                    c["key"],
                    T.FAULT_SIZE_MISMATCH,
                    f"object is {listed[1]} bytes, {word} than the {want} its manifest "
                    f"says for [{c['start']}, {c['end']})",
                    c["start"],
                    c["end"],
                )
            )


#: JSON objects requested together while reading a group (bounds the bytes held at once)
FETCH_BATCH = 4096


def _batches(items: list, size: int):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _parse_small(na, kind, key, body, faults, cluster, broker_name) -> int:
    """Add one manifest, snapshot or event to ``na``: 1, or 0 and an archive fault."""
    if isinstance(body, Exception):
        faults.append(fault(na.node, key, T.FAULT_UNREADABLE, _read_error(body)))
        return 0
    try:
        doc = load_json_doc(body, key)
    except (ValueError, UnicodeDecodeError) as exc:
        faults.append(fault(na.node, key, T.FAULT_BAD_JSON, f"not JSON: {exc}"))
        return 0
    try:
        _add_doc(na, kind, doc, key, cluster, broker_name)
    except (layout.LayoutError, TypeError, ValueError) as exc:
        faults.append(fault(na.node, key, T.FAULT_BAD_FIELDS, str(exc)))
        return 0
    return 1


def _read_error(exc: Exception) -> str:
    if isinstance(exc, ObjectNotFoundError):
        return f"listed but gone when read: {exc}"
    return f"cannot be read: {exc}"


def _add_doc(na: NodeArchive, kind: str, doc, key: str, cluster: str, broker_name: str) -> None:
    if kind == "manifest":
        man = layout.ChunkManifest.from_json(doc, what=key)
        chunk = {f: getattr(man, f) for f in man.__dataclass_fields__}
        chunk["key"] = key[: -len(".json")] + ".log"  # bucketed or flat, as listed
        named = layout.parse_key(key)
        if (named.start, named.end, named.epoch) != (man.start, man.end, man.epoch):
            other = layout.chunk_key(cluster, broker_name, na.node, man.start, man.end, man.epoch)
            raise layout.LayoutError(f"{key}: its fields name another chunk ({other})")
        na.chunks.append(chunk)
    elif kind == "snapshot":
        na.snapshots.append(layout.Snapshot.from_json(doc, what=key))
        na.snapshot_keys.append(key)
    else:
        na.events.append(layout.parse_event(doc, what=key))
        na.event_keys.append(key)


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
    (opening an S3 client is slow next to a range read; Spark reuses Python workers between
    tasks).

    Keyed by the pickled spec, which stays in this process's memory and is never logged."""
    key = pickle.dumps(spec)
    store = _EXECUTOR_STORES.get(key)
    if store is None:
        store = _EXECUTOR_STORES[key] = spec.open()
    return store
