"""Fault archives with their truth: the audit's expected verdict, written down before it runs.

Each generated :class:`Case` is one broker group (one ``brokerName``) in a ``file://`` archive
root, built in archive layout v1 (DESIGN.md section 3) with the broker's own record encoder
(:mod:`tests.faults.logbytes`) and its own shipper (:class:`tests.spark_jobs.builder.Archive`),
then given exactly one fault. Its TRUTH is

* ``expect``: the status of every check (``contracts.audit_tables``: ``pass``, ``fail``,
  ``no_evidence``), or ``None`` where the contract does not decide (e.g. whether a torn object
  also fails log integrity); every case that carries a fault expects at least one ``fail``;
* ``witnesses``: rows that must be in the audit's tables, with the exact key, range, offset or
  values a person acts on;
* ``forbid``: rows that must NOT be there (a finding the data does not support is a false fail).

The fault classes are in :data:`tests.faults.cases.FAULTS`. What the truth decides, from
DESIGN.md section 4 and ``contracts.audit_tables``, where a reader might hesitate:

* a hole in a node's archive (a ``.log`` missing, a chunk without a usable manifest) is not a
  queue-offset gap: log integrity still passes on the records that are there;
* a chunk whose bytes differ from its manifest (sha256) fails archive integrity with its key and
  range; in a pair the replicas differ there too (replica consistency fails); on a single node
  nothing else can tell;
* a byte differing on the slave below its acknowledged offset fails acknowledged durability;
* an offset regression is excused only by an ``offset_reset`` event between the two points;
* a single node has no replica to compare and no acknowledgement to check: ``no_evidence``;
  a group with traffic but no committed offset: offset monotonicity ``no_evidence``;
* undecided (``None``): whether a torn or padded object also fails replica consistency or log
  integrity, and whether an unusable slave chunk below the ack fails acknowledged durability.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.archive.shipper import NodeIdentity, Shipper, StoreDirSource
from contracts import archive_layout as layout
from contracts import audit_tables as at
from tests.faults.logbytes import TOPIC, TS0_MS, Log, write_store_dir
from tests.spark_jobs.builder import CLUSTER, Archive

MASTER, SLAVE = "a-0", "a-1"
PAIR = f"{MASTER}->{SLAVE}"
CGROUP = "g1"  # the consumer group
MAX_LAG_BYTES = 2000  # the run's --max-lag-bytes: lag cases draw their size around it
SNAP1_MS = TS0_MS + 10_000_000  # snapshots and events come after every record
SNAP2_MS = SNAP1_MS + 1_000
EVENT_MS = SNAP1_MS + 500


@dataclass(frozen=True)
class OneOf:
    """A witness value that may be any of ``values`` (the contract allows each)."""

    values: tuple


@dataclass(frozen=True)
class Between:
    """A witness value in ``[lo, hi]`` (where the contract fixes a bound, not the value)."""

    lo: int
    hi: int


@dataclass(frozen=True)
class Contains:
    """A witness value (text) that must mention ``text`` (e.g. the node a failover promoted)."""

    text: str


@dataclass(frozen=True)
class Suffix:
    """A witness value that must end with ``text`` (a key given relative or absolute)."""

    text: str


@dataclass(frozen=True)
class Witness:
    table: str  # one of contracts.audit_tables.TABLES
    row: dict[str, Any]  # columns the row must carry, exactly

    def matches(self, got: dict[str, Any]) -> bool:
        return all(_same(got.get(k), v) for k, v in self.row.items())

    def __str__(self) -> str:
        return f"{self.table}{self.row}"


def is_null(v: Any) -> bool:
    try:
        return v != v  # NaN
    except (TypeError, ValueError):
        return False


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, OneOf):
        return any(_same(got, w) for w in want.values)
    if isinstance(want, Between):
        return got is not None and not is_null(got) and want.lo <= float(got) <= want.hi
    if isinstance(want, Contains):
        return isinstance(got, str) and want.text in got
    if isinstance(want, Suffix):
        return isinstance(got, str) and got.endswith(want.text)
    if isinstance(want, bool) or isinstance(got, bool):
        return bool(got) == bool(want) and got is not None
    try:
        return float(got) == float(want)
    except (TypeError, ValueError):
        return str(got) == str(want)


@dataclass
class Case:
    fault: str
    group: str  # its brokerName
    expect: dict[str, str | None]
    witnesses: list[Witness] = field(default_factory=list)
    forbid: list[Witness] = field(default_factory=list)
    placement: dict[str, Any] = field(default_factory=dict)  # where the fault went, for messages
    tampered: dict[str, str] = field(default_factory=dict)  # object key -> archive fault kind

    @property
    def expected_run(self) -> str:
        """The run status the truth implies (FAILED as soon as one check must fail)."""
        statuses = list(self.expect.values())
        if at.STATUS_FAIL in statuses:
            return at.RUN_FAILED
        if None in statuses:
            raise ValueError(f"{self.fault}: an undecided check in a case that fails nothing")
        return at.run_status(statuses)

    def describe(self) -> str:
        return f"{self.group} ({self.fault}, {self.placement})"


def truth(**overrides: str | None) -> dict[str, str | None]:
    """Every check ``pass`` but the ones named (by check name)."""
    out: dict[str, str | None] = dict.fromkeys(at.CHECKS, at.STATUS_PASS)
    for name, status in overrides.items():
        if name not in out:
            raise ValueError(f"unknown check {name!r}")
        out[name] = status
    return out


@dataclass(frozen=True)
class Shape:
    """Sizes drawn per case: messages, body length, queues, each node's chunk size."""

    n: int
    body_len: int
    queues: int
    chunk_m: int
    chunk_s: int


# -- building -------------------------------------------------------------------------------


class Builder:
    """Builds one group: store directories under ``work``, objects under the archive root."""

    def __init__(self, root: Path, work: Path, group: str, shape: Shape) -> None:
        self.arch = Archive(root, group)
        self.work = work / group
        self.group = group
        self.shape = shape
        self._dirs = 0

    def store_dir(self, log: Log) -> Path:
        self._dirs += 1
        return write_store_dir(log, self.work / f"store{self._dirs}")

    def ship(self, log: Log, node: str, role: str, broker_id: int, chunk: int, **kw) -> None:
        """Ship ``log`` (from ``start`` to ``end`` when given) as ``node`` in ``epoch``."""
        ident = NodeIdentity(CLUSTER, self.group, node, broker_id, role, kw.get("epoch", 0))
        sh = Shipper(self.arch.store, ident, chunk_max_bytes=chunk)
        if "truncate_to" in kw:
            sh.record_truncation(kw["truncate_to"], kw["epoch"])
        sh.ship(StoreDirSource.open(str(self.store_dir(log))), start=kw.get("start"))

    def pair(self, master_log: Log, slave_log: Log) -> None:
        self.ship(master_log, MASTER, "SYNC_MASTER", 0, self.shape.chunk_m)
        self.ship(slave_log, SLAVE, "SLAVE", 1, self.shape.chunk_s)

    def snapshot(self, node: str, at_ms: int, log: Log, committed: dict[int, int], **kw) -> str:
        """A master-role snapshot of ``node``: its log end, queue max offsets, the group's
        committed offsets; ``slaves`` (acknowledged offsets) and ``epoch`` from ``kw``."""
        qmax = log.queue_max()
        slaves = kw.get("slaves", {})
        self.arch.snapshot(
            node,
            kw.get("role", "SYNC_MASTER"),
            at_ms,
            epoch=kw.get("epoch", 0),
            maxPhyOffset=log.end,
            flushedOffset=log.end,
            confirmOffset=min(slaves.values(), default=0),
            slaves=slaves,
            consumerOffsets={f"{TOPIC}@{CGROUP}": {str(q): c for q, c in committed.items()}}
            if committed
            else {},
            queueMaxOffsets={TOPIC: {str(q): v for q, v in qmax.items()}},
        )
        return layout.snapshot_key(CLUSTER, self.group, node, at_ms)

    def evidence(self, log: Log, ack: int, node: str = MASTER) -> tuple[dict, dict]:
        """Two master snapshots: the slave acknowledged ``ack``; the group committed half of
        each queue, then all of it. Returns the two commits."""
        qmax = log.queue_max()
        first = {q: v // 2 for q, v in qmax.items()}
        self.snapshot(node, SNAP1_MS, log, first, slaves={SLAVE: ack})
        self.snapshot(node, SNAP2_MS, log, dict(qmax), slaves={SLAVE: ack})
        return first, dict(qmax)

    def chunks(self, node: str) -> list[layout.ChunkManifest]:
        prefix = layout.node_prefix(CLUSTER, self.group, node) + "commitlog/"
        keys = sorted(o.key for o in self.arch.store.list(prefix) if o.key.endswith(".json"))
        return [layout.ChunkManifest.from_json(self.arch.store.get(k), what=k) for k in keys]

    def chunk_key(self, node: str, man: layout.ChunkManifest) -> str:
        return layout.chunk_key(CLUSTER, self.group, node, man.start, man.end, man.epoch)

    def overwrite(self, key: str, data: bytes) -> None:
        """Replace an object's bytes behind the archive's back (a fault, not a write path)."""
        self.arch.store.put_mutable(key, data)


def self_check(b: Builder, case: Case) -> list[str]:
    """What is wrong with the generated archive itself: every object the case did not tamper
    with follows layout v1 (manifests parse, chunk bytes decode into exactly the manifest's
    records and match its size and sha256); every tampered object is faulty as declared."""
    problems = []
    store = b.arch.store
    keys = {o.key for o in store.list(layout.group_prefix(CLUSTER, b.group))}
    for key in sorted(keys):
        kind = case.tampered.get(key)
        parsed = layout.parse_key(key)
        if parsed is None:
            problems.append(f"{key}: not a layout v1 key")
        elif parsed.kind == "chunk":
            problems += _check_chunk(store, key, keys, kind)
    for key, kind in case.tampered.items():
        if kind == at.FAULT_LOG_MISSING and key in keys:
            problems.append(f"{key}: should be missing")
        if kind in (at.FAULT_BAD_JSON, at.FAULT_BAD_FIELDS):
            problems += _check_bad_doc(store.get(key), key, kind)
    return problems


def _check_chunk(store, key: str, keys: set[str], kind: str | None) -> list[str]:
    from contracts.errors import CorruptRecordError
    from contracts.record.reader import decode_record

    mkey = layout.manifest_key(key)
    if mkey not in keys:
        return [] if kind == at.FAULT_MANIFEST_MISSING else [f"{key}: no manifest"]
    try:
        man = layout.ChunkManifest.from_json(store.get(mkey), what=mkey)
    except (ValueError, layout.LayoutError):
        return []  # a tampered manifest (checked with the documents)
    data = store.get(key)
    size_ok = len(data) == man.end - man.start
    sha_ok = hashlib.sha256(data).hexdigest() == man.sha256
    if kind == at.FAULT_SIZE_MISMATCH:
        return [] if not size_ok else [f"{key}: size matches its manifest"]
    if kind == at.FAULT_SHA256_MISMATCH:
        return [] if size_ok and not sha_ok else [f"{key}: sha256 matches its manifest"]
    if not (size_ok and sha_ok):
        return [f"{key}: differs from its manifest"]
    recs, pos = [], 0
    while pos < len(data):  # record by record: a BLANK ends its file, not the chunk
        try:
            recs.append(decode_record(data, pos, base_offset=man.start, source=key))
        except CorruptRecordError as exc:
            return [f"{key}: {exc}"]
        pos += recs[-1].total_size
    covered = sum(r.total_size for r in recs)
    if len(recs) != man.records or covered != len(data):
        return [f"{key}: {len(recs)} records over {covered} bytes, manifest {man.records}"]
    if any(r.is_blank and r.end % man.mappedFileSize for r in recs):
        return [f"{key}: a BLANK that does not end its file"]
    return []


def _check_bad_doc(data: bytes, key: str, kind: str) -> list[str]:
    try:
        doc = json.loads(data)
    except ValueError:
        return [] if kind == at.FAULT_BAD_JSON else [f"{key}: not JSON but declared {kind}"]
    if kind == at.FAULT_BAD_JSON:
        return [f"{key}: valid JSON but declared {kind}"]
    parse: Callable = (
        layout.ChunkManifest.from_json
        if key.endswith(".json") and "/commitlog/" in key
        else layout.Snapshot.from_json
        if "/snapshots/" in key
        else layout.parse_event
    )
    try:
        parse(doc)
    except (layout.LayoutError, TypeError):
        return []
    return [f"{key}: parses although declared {kind}"]


def scratch_dir() -> str | None:
    """Where generated archives go: tmpfs when there is one (the object store fsyncs each of
    hundreds of small objects; on tmpfs that costs nothing), else the default temp dir."""
    import os

    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
