"""Archive layout version 1, revision 2 (DESIGN.md section 3 plus bucket folders): the keys and
JSON documents in object storage.

The single owner of the layout: the shipper writes and the audit reads through it. Keys are
relative to the archive ROOT (``s3://bucket/prefix`` or ``file:///path``)::

    v1/{cluster}/{brokerName}/{node}/commitlog/{B1}/{B2}/{B3}/{start:020d}-{end:020d}-{epoch}.log
    v1/{cluster}/{brokerName}/{node}/commitlog/{B1}/{B2}/{B3}/{start:020d}-{end:020d}-{epoch}.json
    v1/{cluster}/{brokerName}/{node}/snapshots/{T1}/{T2}/{takenAtMs:013d}.json
    v1/{cluster}/{brokerName}/{node}/events/{T1}/{T2}/{atMs:013d}-{kind}.json
    v1/{cluster}/{brokerName}/_audit/state.json
    v1/{cluster}/{brokerName}/_controller/...   the controller's records: controller_archive.py
    audits/{runId}/...

Bucket folders (revision 2) hold a range of the sortable number that begins the file name: the
number's leading digits with the rest written ``x``. ``B1`` keeps 8 of the start's 20 digits
(10^12 bytes), ``B2`` 11 (10^9), ``B3`` 14 (10^6); ``T1`` keeps 3 of the 13 digits of a time
(10^10 ms, ~116 days), ``T2`` 5 (10^8 ms, ~28 h). So a listing that resumes after a key
(``StartAfter``) reads a few small folders, whatever the archive's age, and the order of full
keys is still offset (time) order. Revision 1 wrote the file names straight into the folder
(``commitlog/{start:020d}-...``); such *flat* keys are still read. Since a digit sorts before
``x``, a node's flat keys all sort before its bucketed ones with the same leading digits: an
archive written flat and then bucketed lists in offset order too.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from contracts.controller_events import CONTROLLER_EVENT_FIELDS
from contracts.log_events import LOG_EVENT_FIELDS
from contracts.read_limits import load_json_doc

VERSION = "v1"
REVISION = 2  # 1: flat folders; 2: bucket folders (read: both)
AUDIT_DIR = "_audit"

EVENT_KINDS = (
    "started",
    "recovered",
    "role_changed",
    "truncated",
    "master_lost",
    "offset_reset",
    *LOG_EVENT_FIELDS,  # the node's own log: contracts/log_events.py
) + tuple(CONTROLLER_EVENT_FIELDS)  # controller mode: contracts/controller_events.py
ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._%-]{0,254}$")  # a file system's path component
_CHUNK_RE = re.compile(r"^(\d{20})-(\d{20})-(\d+)\.(log|json)$")
_SNAPSHOT_RE = re.compile(r"^(\d{13})\.json$")
_EVENT_RE = re.compile(r"^(\d{13})-([a-z_]+)\.json$")


class LayoutError(ValueError):
    """A key or document does not follow archive layout v1."""


def check_name(what: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value) or value == AUDIT_DIR:
        raise LayoutError(f"{what} {value!r:.80} is not a valid archive path component")
    return value


def cluster_prefix(cluster: str) -> str:
    return f"{VERSION}/{check_name('cluster', cluster)}/"


def group_prefix(cluster: str, broker_name: str) -> str:
    return f"{cluster_prefix(cluster)}{check_name('brokerName', broker_name)}/"


def node_prefix(cluster: str, broker_name: str, node: str) -> str:
    return f"{group_prefix(cluster, broker_name)}{check_name('node', node)}/"


#: leading digits each bucket folder keeps, of a 20-digit offset and of a 13-digit time
OFFSET_BUCKETS = (8, 11, 14)
TIME_BUCKETS = (3, 5)
NODE_FOLDERS = ("commitlog/", "snapshots/", "events/")  # a node's folders, below node_prefix
COMMITLOG, SNAPSHOTS, EVENTS = NODE_FOLDERS
_FOLDER_BUCKETS = {"commitlog": OFFSET_BUCKETS, "snapshots": TIME_BUCKETS, "events": TIME_BUCKETS}


def buckets(digits: str, levels: tuple[int, ...]) -> str:
    """The bucket folders (each ending in "/") of a zero-padded number: ``digits`` kept up to
    each level, the rest ``x``."""
    return "".join(digits[:n] + "x" * (len(digits) - n) + "/" for n in levels)


def chunk_key(cluster: str, broker_name: str, node: str, start: int, end: int, epoch: int) -> str:
    """Key of a chunk's bytes; its manifest is the same key ending ``.json``."""
    if not 0 <= start < end:
        raise LayoutError(f"chunk range [{start}, {end}) is empty or negative")
    digits = f"{start:020d}"
    return (
        f"{node_prefix(cluster, broker_name, node)}commitlog/{buckets(digits, OFFSET_BUCKETS)}"
        f"{digits}-{end:020d}-{epoch}.log"
    )


def manifest_key(chunk_log_key: str) -> str:
    if not chunk_log_key.endswith(".log"):
        raise LayoutError(f"{chunk_log_key!r} is not a chunk key")
    return chunk_log_key[: -len(".log")] + ".json"


def _timed(folder: str, at_ms: int) -> str:
    if not 0 <= at_ms < 10**13:
        raise LayoutError(f"time {at_ms} ms does not fit 13 digits")
    digits = f"{at_ms:013d}"
    return f"{folder}/{buckets(digits, TIME_BUCKETS)}{digits}"


def snapshot_key(cluster: str, broker_name: str, node: str, taken_at_ms: int) -> str:
    return f"{node_prefix(cluster, broker_name, node)}{_timed('snapshots', taken_at_ms)}.json"


def snapshot_name(node: str, taken_at_ms: int) -> str:
    """A snapshot's key below its group's prefix (``{node}/snapshots/.../{t}.json``): how the
    audit's findings name the snapshot that promised something."""
    return f"{node}/{_timed('snapshots', taken_at_ms)}.json"


def event_key(cluster: str, broker_name: str, node: str, at_ms: int, kind: str) -> str:
    if kind not in EVENT_KINDS:
        raise LayoutError(f"unknown event kind {kind!r}; one of {', '.join(EVENT_KINDS)}")
    return f"{node_prefix(cluster, broker_name, node)}{_timed('events', at_ms)}-{kind}.json"


def key_name(key: str) -> str:
    """A key's file name (its last path segment)."""
    return key.rsplit("/", 1)[-1]


def resume_after(key: str, digits: int) -> str:
    """A ``StartAfter`` that lists ``key`` again and everything after it: its folder and the
    first ``digits`` characters of its name (a strict prefix of the key sorts before it)."""
    folder, _, name = key.rpartition("/")
    return f"{folder}/{name[:digits]}"


def audit_state_key(cluster: str, broker_name: str) -> str:
    return f"{group_prefix(cluster, broker_name)}{AUDIT_DIR}/state.json"


def audit_run_prefix(run_id: str) -> str:
    return f"audits/{check_name('runId', run_id)}/"


#: audit outputs (DESIGN.md section 4): per group ``audits/{runId}/{brokerName}/`` holds one
#: ``{table}.parquet`` per ``contracts.audit_tables.TABLES``, ``verdict.json``, ``report.html``
#: and the GX Data Docs under ``report/``; ``audits/{runId}/verdict.json`` is the run's verdict
VERDICT_NAME = "verdict.json"
REPORT_NAME = "report.html"
DATA_DOCS_DIR = "report"
DAG_REPORT_NAME = "dag_report.json"


def audit_group_prefix(run_id: str, broker_name: str) -> str:
    return f"{audit_run_prefix(run_id)}{check_name('brokerName', broker_name)}/"


def audit_table_key(run_id: str, broker_name: str, table: str) -> str:
    return f"{audit_group_prefix(run_id, broker_name)}{table}.parquet"


def audit_verdict_key(run_id: str, broker_name: str | None = None) -> str:
    """The group's verdict, or the run's when ``broker_name`` is None."""
    if broker_name is None:
        return audit_run_prefix(run_id) + VERDICT_NAME
    return audit_group_prefix(run_id, broker_name) + VERDICT_NAME


def audit_report_key(run_id: str, broker_name: str) -> str:
    return audit_group_prefix(run_id, broker_name) + REPORT_NAME


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """What a key under ``v1/`` names."""

    cluster: str
    broker_name: str
    node: str
    kind: str  # "chunk", "manifest", "snapshot", "event", "audit_state"
    start: int | None = None
    end: int | None = None
    epoch: int | None = None
    at_ms: int | None = None
    event_kind: str | None = None
    flat: bool = False  # written by layout revision 1 (no bucket folders)


def in_node_folder(key: str) -> bool:
    """Is ``key`` under a node's ``commitlog/``, ``snapshots/`` or ``events/`` (where every
    object must parse: anything else there is an archive fault)?"""
    parts = key.split("/")
    node_ok = len(parts) >= 6 and parts[0] == VERSION and parts[3][:1] != "_"  # not _audit...
    return node_ok and parts[4] in _FOLDER_BUCKETS


def parse_key(key: str) -> ParsedKey | None:
    """Parse a key relative to ROOT; ``None`` for keys outside the v1 layout, and for keys whose
    bucket folders are not the ones their name belongs in."""
    parts = key.split("/")
    if len(parts) < 5 or parts[0] != VERSION:
        return None
    _, cluster, broker_name = parts[:3]
    if parts[3][:1] == "_":  # not a node: _audit, _controller (contracts/controller_archive.py)
        if parts[3:] == [AUDIT_DIR, "state.json"]:
            return ParsedKey(cluster, broker_name, "", "audit_state")
        return None
    if len(parts) < 6 or parts[4] not in _FOLDER_BUCKETS:
        return None
    node, folder, name = parts[3], parts[4], parts[-1]
    levels = _FOLDER_BUCKETS[folder]
    flat = len(parts) == 6
    if not flat:
        width = 20 if folder == "commitlog" else 13
        if len(parts) != 6 + len(levels) or "/".join(parts[5:-1]) + "/" != buckets(
            name[:width], levels
        ):
            return None
    parsed = _parse_name(cluster, broker_name, node, folder, name)
    return None if parsed is None else replace(parsed, flat=flat)


def _parse_name(cluster: str, broker_name: str, node: str, folder: str, name: str):
    if folder == "commitlog":
        m = _CHUNK_RE.match(name)
        if not m:
            return None
        kind = "chunk" if m.group(4) == "log" else "manifest"
        return ParsedKey(
            cluster, broker_name, node, kind, int(m.group(1)), int(m.group(2)), int(m.group(3))
        )
    if folder == "snapshots":
        m = _SNAPSHOT_RE.match(name)
        return (
            ParsedKey(cluster, broker_name, node, "snapshot", at_ms=int(m.group(1))) if m else None
        )
    if folder == "events":
        m = _EVENT_RE.match(name)
        if not m:
            return None
        return ParsedKey(
            cluster, broker_name, node, "event", at_ms=int(m.group(1)), event_kind=m.group(2)
        )
    return None


def _require(doc: dict, what: str, fields: dict[str, type | tuple[type, ...]]) -> None:
    if not isinstance(doc, dict):
        raise LayoutError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    for name, typ in fields.items():
        if name not in doc:
            raise LayoutError(f"{what}: missing field {name!r}")
        value = doc[name]
        if typ is int and isinstance(value, bool):
            raise LayoutError(f"{what}: field {name!r} must be an integer, got {value!r}")
        if not isinstance(value, typ):
            raise LayoutError(f"{what}: field {name!r} has the wrong type ({value!r})")


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _int_map(doc, what: str) -> None:
    """``doc`` must map strings to integers (offsets)."""
    if not isinstance(doc, dict):
        raise LayoutError(f"{what}: expected an object, got {type(doc).__name__}")
    for k, v in doc.items():
        if not isinstance(v, int) or isinstance(v, bool):
            raise LayoutError(f"{what}[{k!r}] must be an integer, got {v!r}")


# the fields a manifest / snapshot must carry, with their JSON types (data tables)
_MANIFEST_FIELDS: dict[str, type] = {
    "start": int, "end": int, "records": int, "firstStoreTs": int,
    "lastStoreTs": int, "sha256": str, "node": str, "brokerId": int,
    "role": str, "epoch": int, "uploadedAt": int, "mappedFileSize": int,
}  # fmt: skip
_SNAPSHOT_FIELDS: dict[str, type] = {
    "node": str, "brokerName": str, "brokerId": int, "role": str, "epoch": int,
    "takenAt": int, "maxPhyOffset": int, "flushedOffset": int,
    "confirmOffset": int, "slaves": dict, "consumerOffsets": dict,
    "queueMaxOffsets": dict, "mappedFileSize": int,
}  # fmt: skip


@dataclass(slots=True)
class ChunkManifest:
    start: int
    end: int
    records: int  # BLANK fillers included
    firstStoreTs: int
    lastStoreTs: int
    sha256: str
    node: str
    brokerId: int
    role: str
    epoch: int
    uploadedAt: int
    mappedFileSize: int

    def to_json(self) -> bytes:
        return json_bytes(asdict(self))

    @classmethod
    def from_json(cls, data: bytes | str | dict, what: str = "manifest") -> ChunkManifest:
        doc = load_json_doc(data, what, LayoutError) if isinstance(data, (bytes, str)) else data
        _require(doc, what, _MANIFEST_FIELDS)
        if not 0 <= doc["start"] < doc["end"]:
            raise LayoutError(f"{what}: empty range [{doc['start']}, {doc['end']})")
        if not _SHA256.fullmatch(doc["sha256"]):
            raise LayoutError(f"{what}: sha256 {doc['sha256']!r} is not 64 hex digits")
        if doc["mappedFileSize"] <= 0 or doc["epoch"] < 0 or doc["records"] < 0:
            raise LayoutError(f"{what}: mappedFileSize, epoch and records must be >= 0")
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__})


@dataclass(slots=True)
class Snapshot:
    node: str
    brokerName: str
    brokerId: int
    role: str
    epoch: int
    takenAt: int
    maxPhyOffset: int
    flushedOffset: int
    confirmOffset: int
    slaves: dict[str, int] = field(default_factory=dict)
    consumerOffsets: dict[str, dict[str, int]] = field(default_factory=dict)
    queueMaxOffsets: dict[str, dict[str, int]] = field(default_factory=dict)
    delayOffsets: dict[str, int] = field(default_factory=dict)
    dataVersion: dict[str, Any] = field(default_factory=dict)
    mappedFileSize: int = 1 << 30

    def to_json(self) -> bytes:
        return json_bytes(asdict(self))

    @classmethod
    def from_json(cls, data: bytes | str | dict, what: str = "snapshot") -> Snapshot:
        doc = load_json_doc(data, what, LayoutError) if isinstance(data, (bytes, str)) else data
        _require(doc, what, _SNAPSHOT_FIELDS)
        if doc["role"] not in ROLES:
            raise LayoutError(f"{what}: role {doc['role']!r} is not one of {', '.join(ROLES)}")
        _int_map(doc["slaves"], f"{what}: slaves")
        for name in ("consumerOffsets", "queueMaxOffsets"):
            for k, queues in doc[name].items():
                _int_map(queues, f"{what}: {name}[{k!r}]")
        values = {k: doc[k] for k in cls.__dataclass_fields__ if k in doc}
        values.setdefault("delayOffsets", {})
        values.setdefault("dataVersion", {})
        return cls(**values)


def make_event(
    kind: str, node: str, cluster: str, broker_name: str, at_ms: int, epoch: int, **extra: Any
) -> dict[str, Any]:
    """An event document; ``extra`` carries the kind's own fields (``from``, ``to``, ...)."""
    if kind not in EVENT_KINDS:
        raise LayoutError(f"unknown event kind {kind!r}")
    doc = dict(kind=kind, node=node, cluster=cluster, brokerName=broker_name, at=at_ms, epoch=epoch)
    doc.update(extra)
    return doc


def parse_event(data: bytes | str | dict, what: str = "event") -> dict[str, Any]:
    doc = load_json_doc(data, what, LayoutError) if isinstance(data, (bytes, str)) else data
    _require(
        doc,
        what,
        {"kind": str, "node": str, "cluster": str, "brokerName": str, "at": int, "epoch": int},
    )
    if doc["kind"] not in EVENT_KINDS:
        raise LayoutError(f"{what}: unknown event kind {doc['kind']!r}")
    needs = {
        "recovered": ("from", "to"),
        "role_changed": ("from", "to"),
        "truncated": ("from", "to"),
        "offset_reset": ("group", "topic", "queue", "from", "to"),
        **CONTROLLER_EVENT_FIELDS,
    }.get(doc["kind"], ())
    if doc["kind"] in LOG_EVENT_FIELDS:  # typed: the audit judges their values
        _require(doc, what, LOG_EVENT_FIELDS[doc["kind"]])
    for name in needs:
        if name not in doc:
            raise LayoutError(f"{what}: {doc['kind']} event without {name!r}")
    return doc


def json_bytes(doc: dict[str, Any]) -> bytes:
    """Strict, key-sorted JSON bytes as every archive document is written."""
    return json.dumps(doc, sort_keys=True).encode()
