"""Reading the archive: the driver lists keys and small JSON; executors read byte ranges.

The driver never downloads commit log bytes: it builds a table of chunks (key, node, range,
epoch) and hands it to Spark tasks, which re-open the store from a picklable ``StoreSpec`` and
read their ranges.
"""

from __future__ import annotations

import json
import pickle
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from contracts import archive_layout as layout
from contracts import audit_tables as T
from contracts.errors import ArchiveError, AuditInputError, ObjectNotFoundError
from contracts.object_store import ObjectStore, StoreSpec


@dataclass
class NodeArchive:
    node: str
    chunks: list[dict] = field(default_factory=list)  # manifest fields + "key"
    orphans: list[str] = field(default_factory=list)  # .log keys without a manifest
    snapshots: list[layout.Snapshot] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    @property
    def end(self) -> int:
        return max((c["end"] for c in self.chunks), default=0)


@dataclass
class GroupArchive:
    cluster: str
    broker_name: str
    nodes: dict[str, NodeArchive]
    docs: dict[str, dict] = field(default_factory=dict)  # key -> JSON of what was loaded
    #: archive faults found while listing and reading the JSON objects (``archive_faults`` rows)
    faults: list[dict] = field(default_factory=list)
    #: JSON documents read and parsed without a fault (evidence of the archive check)
    docs_read: int = 0


def fault(node: str, key: str, kind: str, detail: str, start=None, end=None) -> dict:
    """One ``archive_faults`` row (contracts.audit_tables)."""
    return {"node": node, "key": key, "kind": kind, "start": start, "end": end, "detail": detail}


def _fetch(store: ObjectStore, key: str) -> bytes | Exception:
    """The object's bytes, or the error that kept it from being read (a finding, not a crash)."""
    try:
        return store.get(key)
    except ArchiveError as exc:
        return exc


def list_broker_names(store: ObjectStore, cluster: str) -> list[str]:
    prefix = layout.cluster_prefix(cluster)
    names = sorted({o.key[len(prefix) :].split("/", 1)[0] for o in store.list(prefix)})
    if not names:
        raise AuditInputError(f"no archive for cluster {cluster!r} under {store.root}")
    return names


def load_group(
    store: ObjectStore,
    cluster: str,
    broker_name: str,
    known: dict[str, dict] | Callable[[], dict[str, dict] | None] | None = None,
) -> GroupArchive:
    """Every node's chunks (manifests), snapshots and events of one group. ``known``: JSON of
    objects read by an earlier run (archive objects never change), used instead of reading
    them again; keys no longer listed are ignored. It may be a callable, called once the
    listing is done (so its own read can overlap the listing)."""
    prefix = layout.group_prefix(cluster, broker_name)
    nodes: dict[str, NodeArchive] = {}
    logs: dict[str, tuple[str, int]] = {}  # .log key -> (node, listed size)
    small: list[tuple] = []  # (parsed key, key) of the JSON objects to read
    for info in store.list(prefix):
        parsed = layout.parse_key(info.key)
        if parsed is None or parsed.kind == "audit_state":
            continue
        nodes.setdefault(parsed.node, NodeArchive(parsed.node))
        if parsed.kind == "chunk":
            logs[info.key] = (parsed.node, info.size)
        elif parsed.kind in ("manifest", "snapshot", "event"):
            small.append((parsed, info.key))
    # the small JSON objects are read concurrently (one request each; a nightly incremental
    # run with nothing new is mostly these reads)
    known = (known() if callable(known) else known) or {}
    todo = [key for _parsed, key in small if key not in known]
    fetched = dict(zip(todo, io_pool().map(lambda k: _fetch(store, k), todo), strict=True))
    docs: dict[str, dict] = {}
    faults: list[dict] = []
    for parsed, key in small:
        na = nodes[parsed.node]
        if key in fetched:
            body = fetched[key]
            if isinstance(body, Exception):
                faults.append(fault(na.node, key, T.FAULT_UNREADABLE, _read_error(body)))
                continue
            try:
                doc = json.loads(body)
            except (ValueError, UnicodeDecodeError) as exc:
                faults.append(fault(na.node, key, T.FAULT_BAD_JSON, f"not JSON: {exc}"))
                continue
        else:
            doc = known[key]
        try:
            _add_doc(na, parsed.kind, doc, key, cluster, broker_name)
        except (layout.LayoutError, TypeError, ValueError) as exc:
            faults.append(fault(na.node, key, T.FAULT_BAD_FIELDS, str(exc)))
            continue
        docs[key] = doc
    if not nodes:
        raise AuditInputError(f"no archive for {cluster}/{broker_name} under {store.root}")
    for na in nodes.values():
        keys = {c["key"] for c in na.chunks}
        na.orphans = sorted(k for k, (n, _size) in logs.items() if n == na.node and k not in keys)
        for k in na.orphans:
            faults.append(
                fault(na.node, k, T.FAULT_MANIFEST_MISSING, "a .log object without its manifest")
            )
        for c in na.chunks:
            listed = logs.get(c["key"])
            want = c["end"] - c["start"]
            if listed is None:
                c["absent"] = True
                faults.append(
                    fault(na.node, c["key"], T.FAULT_LOG_MISSING,
                          f"manifest says [{c['start']}, {c['end']}) but the .log object is absent",
                          c["start"], c["end"])
                )  # fmt: skip
            elif listed[1] != want:
                c["size_mismatch"] = True
                word = "shorter" if listed[1] < want else "longer"
                faults.append(
                    fault(na.node, c["key"], T.FAULT_SIZE_MISMATCH,
                          f"object is {listed[1]} bytes, {word} than the {want} its manifest "
                          f"says for [{c['start']}, {c['end']})", c["start"], c["end"])
                )  # fmt: skip
        na.chunks.sort(key=lambda c: (c["start"], c["epoch"]))
        na.snapshots.sort(key=lambda s: s.takenAt)
        na.events.sort(key=lambda e: e["at"])
    ga = GroupArchive(cluster, broker_name, nodes, docs, faults, len(docs))
    return ga


def _read_error(exc: Exception) -> str:
    if isinstance(exc, ObjectNotFoundError):
        return f"listed but gone when read: {exc}"
    return f"cannot be read: {exc}"


def _add_doc(na: NodeArchive, kind: str, doc, key: str, cluster: str, broker_name: str) -> None:
    if kind == "manifest":
        man = layout.ChunkManifest.from_json(doc, what=key)
        chunk = {f: getattr(man, f) for f in man.__dataclass_fields__}
        chunk["key"] = layout.chunk_key(
            cluster, broker_name, na.node, man.start, man.end, man.epoch
        )
        if layout.manifest_key(chunk["key"]) != key:
            raise layout.LayoutError(f"{key}: its fields name another chunk ({chunk['key']})")
        na.chunks.append(chunk)
    elif kind == "snapshot":
        na.snapshots.append(layout.Snapshot.from_json(doc, what=key))
    else:
        na.events.append(layout.parse_event(doc, what=key))


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
