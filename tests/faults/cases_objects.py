"""Fault classes of archive objects (and the clean baselines), each builder returning its
:class:`~tests.faults.generator.Case` with the truth.

A builder gets a :class:`~tests.faults.generator.Builder` (one group) and Hypothesis' ``draw``,
and draws where its fault goes (which chunk, record, byte, bit, node, how many bytes).
"""

from __future__ import annotations

from hypothesis import strategies as st

from contracts import archive_layout as layout
from contracts import audit_tables as at
from tests.faults.generator import (
    CGROUP,
    EVENT_MS,
    MASTER,
    PAIR,
    SLAVE,
    SNAP1_MS,
    SNAP2_MS,
    Builder,
    Case,
    Witness,
    truth,
)
from tests.faults.logbytes import TOPIC, Log, Rec, make_log
from tests.spark_jobs.builder import CLUSTER

AI, RC, AD, LI, OM = at.CHECKS
FAIL, PASS, NONE = at.STATUS_FAIL, at.STATUS_PASS, at.STATUS_NO_EVIDENCE
GARBAGE = (b"", b"{", b"\xff\xfe\x00garbage", b'{"start": 0,', b"[1, 2", b"nul")


def base_log(b: Builder) -> Log:
    s = b.shape
    return make_log(s.n, s.body_len, s.queues)


def clean_pair(b: Builder) -> Log:
    log = base_log(b)
    b.pair(log, log)
    b.evidence(log, ack=log.end)
    return log


def pick_chunk(b: Builder, draw, node: str) -> tuple[str, layout.ChunkManifest]:
    man = draw(st.sampled_from(b.chunks(node)), label="chunk")
    return b.chunk_key(node, man), man


def pick_message(log: Log, draw, lo: int = 0) -> Rec:
    return draw(st.sampled_from([r for r in log.messages() if r.offset >= lo]), label="record")


def flip_target(log: Log, rec: Rec, region: str, draw) -> int:
    """An absolute offset inside ``region`` of ``rec``: ``body`` (the CRC covers it),
    ``properties`` (not a separator: the record stays well-formed) or ``store_ts`` (one of its
    five low bytes)."""
    if region == "body":
        return rec.body_at + draw(st.integers(0, rec.body_len - 1), label="body byte")
    if region == "properties":
        text = [i for i in range(rec.props_len) if log.data[rec.props_at + i] not in (1, 2)]
        return rec.props_at + draw(st.sampled_from(text), label="property byte")
    return rec.ts_at + 8 - 1 - draw(st.integers(0, 4), label="store timestamp byte")


def bit(draw, region: str = "") -> int:
    """A one-bit mask; in properties only the five low bits, so a text byte stays printable
    ASCII (never a separator, never invalid UTF-8) and the record stays well-formed."""
    return 1 << draw(st.integers(0, 4 if region == "properties" else 7), label="bit")


def fault_row(node: str, key: str, kind: str, man: layout.ChunkManifest | None) -> Witness:
    row = {"node": node, "key": key, "kind": kind}
    if man is not None:
        row.update(start=man.start, end=man.end)
    return Witness("archive_faults", row)


# -- clean ----------------------------------------------------------------------------------


def clean(b: Builder, draw, variant: str = "") -> Case:
    log = clean_pair(b)
    no_failing = [Witness("ranges", {"verdict": v}) for v in at.FAILING_RANGE_VERDICTS]
    return Case("clean", b.group, truth(), forbid=no_failing, placement={"end": log.end})


def single_node_no_offsets(b: Builder, draw, variant: str = "") -> Case:
    log = base_log(b)
    b.ship(log, MASTER, "SYNC_MASTER", 0, b.shape.chunk_m)
    b.snapshot(MASTER, SNAP1_MS, log, {}, slaves={})
    return Case(
        "single-node-no-offsets",
        b.group,
        truth(**{RC: NONE, AD: NONE, OM: NONE}),
        placement={"end": log.end},
    )


# -- archive objects ------------------------------------------------------------------------


def log_missing(b: Builder, draw, variant: str = "") -> Case:
    clean_pair(b)
    key, man = pick_chunk(b, draw, SLAVE)
    b.arch.store.delete(key)
    return Case(
        "log-missing",
        b.group,
        truth(**{AI: FAIL, RC: FAIL, AD: None}),
        witnesses=[
            fault_row(SLAVE, key, at.FAULT_LOG_MISSING, man),
            Witness(
                "ranges", {"pair": PAIR, "start": man.start, "end": man.end, "verdict": at.MISSING}
            ),
        ],
        placement={"key": key},
        tampered={key: at.FAULT_LOG_MISSING},
    )


def object_size(b: Builder, draw, variant: str = "") -> Case:
    clean_pair(b)
    node = draw(st.sampled_from((MASTER, SLAVE)), label="node")
    key, man = pick_chunk(b, draw, node)
    data = b.arch.store.get(key)
    longer = variant == "longer"
    if longer:
        data += draw(st.binary(min_size=1, max_size=300), label="appended")
    else:
        data = data[: len(data) - draw(st.integers(1, len(data)), label="cut bytes")]
    b.overwrite(key, data)
    return Case(
        "object-longer" if longer else "object-shorter",
        b.group,
        truth(**{AI: FAIL, RC: None, AD: None, LI: None}),
        witnesses=[fault_row(node, key, at.FAULT_SIZE_MISMATCH, man)],
        placement={"key": key, "size": len(data)},
        tampered={key: at.FAULT_SIZE_MISMATCH},
    )


def sha256_flip(b: Builder, draw, variant: str = "") -> Case:
    """A bit flipped in an archived object outside any body (properties or store timestamp):
    every record still decodes and passes its CRC; only the manifest's sha256 tells. In a pair
    the replicas differ too; on a single node (``variant="single-node"``, offsets committed)
    nothing else can tell, and nothing else has evidence about replicas or acknowledgements."""
    single = variant == "single-node"
    if single:
        log = base_log(b)
        b.ship(log, MASTER, "SYNC_MASTER", 0, b.shape.chunk_m)
        qmax = log.queue_max()
        b.snapshot(MASTER, SNAP1_MS, log, {q: v // 2 for q, v in qmax.items()}, slaves={})
        b.snapshot(MASTER, SNAP2_MS, log, dict(qmax), slaves={})
        node = MASTER
    else:
        log = clean_pair(b)
        node = draw(st.sampled_from((MASTER, SLAVE)), label="node")
    chunks = [c for c in b.chunks(node) if any(c.start <= r.offset < c.end for r in log.messages())]
    man = draw(st.sampled_from(chunks), label="chunk")  # (not a chunk holding only a BLANK)
    key = b.chunk_key(node, man)
    rec = pick_message(log.cut(man.end), draw, lo=man.start)
    region = draw(st.sampled_from(("properties", "store_ts")), label="region")
    at_ = flip_target(log, rec, region, draw)
    data = bytearray(b.arch.store.get(key))
    data[at_ - man.start] ^= bit(draw, region)
    b.overwrite(key, bytes(data))
    expect = (
        truth(**{AI: FAIL, RC: NONE, AD: NONE})
        if single
        else truth(**{AI: FAIL, RC: FAIL, AD: FAIL if node == SLAVE else None})
    )
    return Case(
        "sha256-flip-single-node" if single else "sha256-flip",
        b.group,
        expect,
        witnesses=[fault_row(node, key, at.FAULT_SHA256_MISMATCH, man)],
        placement={"key": key, "offset": at_, "region": region, "record": rec.offset},
        tampered={key: at.FAULT_SHA256_MISMATCH},
    )


def bad_manifest(b: Builder, draw, variant: str = "") -> Case:
    clean_pair(b)
    node = draw(st.sampled_from((MASTER, SLAVE)), label="node")
    key, man = pick_chunk(b, draw, node)
    mkey = layout.manifest_key(key)
    as_json = variant == "bad-fields"
    if as_json:
        doc = {**_manifest_doc(man)}
        if draw(st.booleans(), label="drop a field"):
            doc.pop(draw(st.sampled_from(sorted(doc)), label="field"))
        else:
            doc["end"] = str(man.end)
        data, kind = layout.json_bytes(doc), at.FAULT_BAD_FIELDS
    else:
        data, kind = draw(st.sampled_from(GARBAGE), label="garbage"), at.FAULT_BAD_JSON
    b.overwrite(mkey, data)
    return Case(
        f"manifest-{kind.replace('_', '-')}",
        b.group,
        truth(**{AI: FAIL, RC: None, AD: None}),
        witnesses=[fault_row(node, mkey, kind, None)],
        placement={"key": mkey, "data": data[:40]},
        tampered={mkey: kind},
    )


def _manifest_doc(man: layout.ChunkManifest) -> dict:
    import json

    return json.loads(man.to_json())


def manifest_missing(b: Builder, draw, variant: str = "") -> Case:
    clean_pair(b)
    key, man = pick_chunk(b, draw, SLAVE)
    b.arch.store.delete(layout.manifest_key(key))
    return Case(
        "manifest-missing",
        b.group,
        truth(**{AI: FAIL, RC: None, AD: None}),
        witnesses=[fault_row(SLAVE, key, at.FAULT_MANIFEST_MISSING, man)],
        placement={"key": key},
        tampered={key: at.FAULT_MANIFEST_MISSING},
    )


def bad_document(b: Builder, draw, variant: str = "") -> Case:
    """A snapshot or event object that is not JSON or lacks fields, next to good ones: only
    archive integrity fails, every other check judges the good documents."""
    clean_pair(b)
    what, _, fault_name = variant.partition("-")
    node = draw(st.sampled_from((MASTER, SLAVE)), label="node")
    if what == "snapshot":
        key = layout.snapshot_key(CLUSTER, b.group, node, EVENT_MS)
        good = {
            "node": node,
            "brokerName": b.group,
            "brokerId": 0,
            "role": "SYNC_MASTER",
            "epoch": 0,
            "takenAt": EVENT_MS,
            "maxPhyOffset": 0,
            "flushedOffset": 0,
            "confirmOffset": 0,
            "slaves": {},
            "consumerOffsets": {},
            "queueMaxOffsets": {},
            "mappedFileSize": 4096,
        }
    else:
        kind = draw(st.sampled_from(("role_changed", "offset_reset", "truncated")), label="kind")
        key = layout.event_key(CLUSTER, b.group, node, EVENT_MS, kind)
        own = {"from": 1, "to": 0}
        if kind == "offset_reset":
            own.update(group=CGROUP, topic=TOPIC, queue=0)
        good = layout.make_event(kind, node, CLUSTER, b.group, EVENT_MS, 0, **own)
    if fault_name == "bad-fields":
        drop = draw(st.sampled_from(sorted(good)), label="field")
        doc = {k: v for k, v in good.items() if k != drop}
        data, fault = layout.json_bytes(doc), at.FAULT_BAD_FIELDS
    else:
        data, fault = draw(st.sampled_from(GARBAGE), label="garbage"), at.FAULT_BAD_JSON
    b.overwrite(key, data)
    return Case(
        f"{what}-{fault.replace('_', '-')}",
        b.group,
        truth(**{AI: FAIL}),
        witnesses=[fault_row(node, key, fault, None)],
        placement={"key": key, "data": data[:40]},
        tampered={key: fault},
    )
