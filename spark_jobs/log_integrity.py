"""Check 3, log integrity, per node: records chain, magic codes, body CRCs, BLANK only at file
ends, records inside one file, and queue offsets contiguous per (topic, queueId).

read: a master chunk that a replica comparison window covers exactly is checked inside that
window's task, on the bytes it read for the comparison (see ``replica_consistency``); every other
chunk to check gets a task of its own here (executors range-read the chunk);
transform: per-chunk issues + per-queue first/last queue offsets + a record count (small rows,
never a row per record), then queue offset continuity across the chunks of a chain is judged on
the driver (:func:`judge`); write: the ``records_issues`` rows.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from contracts import audit_tables as T
from contracts.errors import ArchiveError, ObjectNotFoundError, ObjectTooLargeError
from contracts.object_store import StoreSpec
from contracts.record_walk import check_chunk
from spark_jobs.archive_reader import executor_store
from spark_jobs.commit_history import commit_rows
from spark_jobs.delivery import MESSAGE_KIND, chunk_messages, delivery_on
from spark_jobs.session import deal, has_context, run_scan_tasks, task_partitions


def assign_chains(chunks: list[dict]) -> list[dict]:
    """Copies of ``chunks`` with ``chain``: chunks of one node that follow each other (a chunk's
    predecessor ends where it starts, in its epoch or the latest earlier one). A chunk after a
    truncation point (no predecessor) or a second successor starts a new chain; queue offsets
    are checked for continuity along a chain."""
    out = []
    by_node: dict[str, list[dict]] = {}
    for c in chunks:
        by_node.setdefault(c["node"], []).append(dict(c))
    chain_no = 0
    for cs in by_node.values():
        cs.sort(key=lambda c: (c["epoch"], c["start"]))
        continued: set[int] = set()
        by_end: dict[int, list[int]] = {}  # end offset -> earlier chunks ending there
        for i, c in enumerate(cs):
            prev = [j for j in by_end.get(c["start"], []) if j not in continued]
            by_end.setdefault(c["end"], []).append(i)
            if prev:
                j = max(prev, key=lambda j: cs[j]["epoch"])
                continued.add(j)
                c["chain"] = cs[j]["chain"]
            else:
                chain_no += 1
                c["chain"] = chain_no
        out += cs
    return out


# One row layout for everything the executors send back, from both Spark jobs of an audit
# (replica comparison windows and chunk checks): small aggregates, never a row per record.
SCAN_FIELDS = [
    ("kind", "string"),  # range | issue | queue | count | window | fault
    ("pair", "string"),  # range: "master->slave"
    ("start", "long"),  # range: first offset; issue/queue/count: the chunk's start
    ("end", "long"),  # range: end offset; count: the chunk's end
    ("verdict", "string"),  # range: match, divergent, master_only, slave_only, neither...
    ("detail", "string"),  # range and issue detail
    ("node", "string"),  # issue/queue/count: the chunk's node
    ("key", "string"),  # issue/queue/count: the chunk's object key
    ("offset", "long"),  # issue: the record's log offset
    ("check", "string"),  # issue: crc_mismatch, queue_offset_gap, ...; fault: its kind
    ("topic", "string"),  # queue, issue
    ("queue_id", "int"),  # queue, issue
    ("queue_offset", "long"),  # issue: the record's queue offset
    ("msg_id", "string"),  # issue: the record's msgId
    ("expected", "string"),  # issue: what the check expected
    ("found", "string"),  # issue: what it found
    ("first_qo", "long"),  # queue: first queue offset in the chunk
    ("last_qo", "long"),  # queue: last queue offset in the chunk
    ("records", "long"),  # count: records checked in the chunk (BLANKs included)
    ("check_s", "double"),  # count: wall seconds inside the record checks of this chunk
    ("check_cpu_s", "double"),  # count: CPU seconds of the same
    ("read_s", "double"),  # window: wall seconds reading both sides' bytes
    ("compare_s", "double"),  # window: wall seconds comparing them
    ("at", "long"),  # commit: the record's store timestamp (its body in detail)
]
SCAN_COLUMNS = [name for name, _ in SCAN_FIELDS]
SCAN_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in SCAN_FIELDS)
_BLANK_ROW = dict.fromkeys(SCAN_COLUMNS)


def scan_row(**fields) -> tuple:
    return tuple({**_BLANK_ROW, **fields}[c] for c in SCAN_COLUMNS)


def chunk_rows(
    node: str,
    key: str,
    start: int,
    data: bytes,
    file_size: int,
    sha256: str | None = None,
    msg_epoch: int | None = None,
) -> list[tuple]:
    """Check one chunk's bytes against its manifest's ``sha256`` (when given) and its records;
    its issues, per-queue first/last queue offsets and one count row (with the seconds the
    checks took), in the ``SCAN_FIELDS`` layout. With ``msg_epoch`` (a master's chunk, on a
    SparkContext) also a ``message`` row per stored message for the ``delivery`` check, which
    stays in Spark (``delivery.MESSAGE_ROW``)."""
    rows = []
    if sha256 is not None:
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            rows.append(
                fault_row(
                    node,
                    key,
                    T.FAULT_SHA256_MISMATCH,
                    start,
                    start + len(data),
                    f"sha256 {got} != manifest's {sha256}",
                )
            )
    t0, c0 = time.perf_counter(), time.thread_time()
    issues, queues, n = check_chunk(data, start, file_size, node)
    check_s, check_cpu_s = time.perf_counter() - t0, time.thread_time() - c0
    rows += [
        scan_row(
            kind="issue",
            start=start,
            node=node,
            key=key,
            offset=off,
            check=check,
            detail=detail,
            topic=topic,
            queue_id=qid,
            queue_offset=qo,
            msg_id=msg_id,
            expected=expected,
            found=found,
        )
        for off, check, detail, topic, qid, qo, msg_id, expected, found in issues
    ]
    rows += [
        scan_row(
            kind="queue",
            start=start,
            node=node,
            key=key,
            topic=topic,
            queue_id=qid,
            first_qo=first,
            last_qo=last,
        )
        for (topic, qid), (first, last) in queues.items()
    ]
    rows += commit_rows(node, key, start, data, queues, scan_row)  # offset commit records
    if msg_epoch is not None:  # the delivery check's arrays, from the same bytes
        kept = chunk_messages(data, start, msg_epoch, key, sound=not issues)
        if kept is not None:
            rows.append(kept)
    rows.append(
        scan_row(
            kind="count",
            start=start,
            end=start + len(data),
            node=node,
            key=key,
            records=n,
            check_s=check_s,
            check_cpu_s=check_cpu_s,
        )
    )
    return rows


def fault_row(node: str, key: str, kind: str, start: int, end: int, detail: str) -> tuple:
    """An archive fault found by an executor (``archive_faults``)."""
    return scan_row(
        kind="fault", node=node, key=key, check=kind, start=start, end=end, detail=detail
    )


def read_chunk(store, node: str, key: str, start: int, end: int) -> tuple[bytes | None, tuple]:
    """The chunk's whole object, or None and the fault row saying why it could not be used (a
    missing object, an unreadable one, or one whose size is not its manifest's)."""
    try:
        data = store.get(key, max(0, end - start))  # never more than the manifest's size
    except ObjectNotFoundError as exc:
        return None, fault_row(node, key, T.FAULT_LOG_MISSING, start, end, str(exc))
    except ObjectTooLargeError as exc:
        return None, fault_row(
            node,
            key,
            T.FAULT_SIZE_MISMATCH,
            start,
            end,
            f"object is longer than the {end - start} bytes its manifest says ({exc})",
        )
    except ArchiveError as exc:
        return None, fault_row(node, key, T.FAULT_UNREADABLE, start, end, str(exc))
    if len(data) != end - start:
        word = "shorter" if len(data) < end - start else "longer"
        return None, fault_row(
            node,
            key,
            T.FAULT_SIZE_MISMATCH,
            start,
            end,
            f"object is {len(data)} bytes, {word} than the {end - start} its manifest says",
        )
    return data, ()


def _check_partition(spec: StoreSpec):
    def run(chunks: Iterator[tuple]) -> Iterator[tuple]:
        store = executor_store(spec)
        for node, key, start, end, file_size, sha256, msg_epoch in chunks:
            data, bad = read_chunk(store, node, key, start, end)
            if data is None:
                yield bad
                continue
            yield from chunk_rows(node, key, start, data, int(file_size), sha256, msg_epoch)

    return run


#: chunks checked by one Spark job: a year's archive of small chunks (1.35 M at a chunk a
#: 70 s on 3 nodes) as one job put every row in and out through the driver JVM at once (its
#: default 1 GiB heap) and never finished; batches bound what a job carries
CHUNKS_PER_JOB = 50_000


def run_log_integrity(spark, spec: StoreSpec, chunks: list[dict], tally=None) -> ScanTally:
    """Spark jobs of at most ``CHUNKS_PER_JOB`` chunks each: the executors read and check
    ``chunks`` and return ``SCAN_FIELDS`` rows (issues, per-queue first/last offsets, record
    counts), folded into ``tally`` (a new :class:`ScanTally` if None) as each job ends;
    :func:`judge` turns it into findings. No job at all when there is no chunk."""
    tally = ScanTally() if tally is None else tally
    schema = "node string, key string, start long, end long, mappedFileSize long, sha256 string"
    schema += ", msg_epoch long"
    keeping = (
        has_context(spark) and delivery_on()
    )  # the delivery check's rows stay in Spark (else: its own job)
    for i in range(0, len(chunks), CHUNKS_PER_JOB):
        rows = [
            (
                c["node"],
                c["key"],
                c["start"],
                c["end"],
                c["mappedFileSize"],
                c.get("sha256"),
                message_epoch(c) if keeping else None,
            )
            for c in chunks[i : i + CHUNKS_PER_JOB]
        ]
        n_parts = task_partitions(spark, len(rows))
        rows = deal(sorted(rows, key=lambda r: r[2] - r[3]), n_parts)  # largest first
        fn = _check_partition(spec)
        out, kept = run_scan_tasks(spark, rows, schema, n_parts, fn, SCAN_SCHEMA, MESSAGE_KIND)
        tally.add(out)
        if kept is not None:
            tally.messages.extend(kept)
    return tally


def message_epoch(chunk: dict) -> int | None:
    """The epoch a master's chunk was shipped in (its messages are counted by ``delivery``);
    None for a slave's (its copies are the same messages)."""
    return None if chunk.get("role") == "SLAVE" else int(chunk["epoch"])


@dataclass
class ScanTally:
    """The executors' ``SCAN_FIELDS`` rows of chunk checks, folded as they arrive: sums of the
    count rows, the keys they name, issues and faults as rows, and per chunk and queue only the
    first/last queue offsets (what queue continuity is judged on)."""

    records: int = 0
    check_s: float = 0.0
    check_cpu_s: float = 0.0
    checked: set[str] = field(default_factory=set)  # keys of chunks whose records were checked
    issues: list[dict] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)
    # (node, key, start, topic, queue_id, first_qo, last_qo)
    queues: list[tuple] = field(default_factory=list)
    commits: list[dict] = field(default_factory=list)  # offset commit records (commit_history)
    messages: list = field(default_factory=list)  # the delivery check's arrays, per chunk

    def add(self, rows) -> ScanTally:
        for r in rows:
            kind = r["kind"]
            if kind == "count":
                self.records += r["records"]
                self.check_s += r["check_s"]
                self.check_cpu_s += r["check_cpu_s"]
                self.checked.add(r["key"])
            elif kind == "queue":
                self.queues.append(
                    (
                        r["node"],
                        r["key"],
                        r["start"],
                        r["topic"],
                        r["queue_id"],
                        r["first_qo"],
                        r["last_qo"],
                    )
                )
            elif kind == "issue":
                self.issues.append({k: r.get(k) for k in ISSUE_FIELDS})
            elif kind == "commit":
                self.commits.append({k: r[k] for k in ("node", "key", "offset", "at", "detail")})
            elif kind == "fault":
                self.faults.append(
                    {
                        "node": r["node"],
                        "key": r["key"],
                        "kind": r["check"],
                        "start": r["start"],
                        "end": r["end"],
                        "detail": r["detail"],
                    }
                )
        return self


ISSUE_FIELDS = (
    "node", "offset", "check", "key", "topic", "queue_id", "queue_offset", "msg_id", "expected",
    "found", "detail",
)  # fmt: skip


@dataclass
class IntegrityResult:
    issues: list[dict]  # ISSUE_FIELDS; sorted by (node, offset)
    records: int  # records checked (BLANK fillers included)
    check_s: float  # wall seconds inside the record checks, summed over chunks
    check_cpu_s: float  # CPU seconds of the same
    faults: list[dict] = field(default_factory=list)  # archive faults the executors found
    checked_keys: set[str] = field(default_factory=set)  # chunks whose records were checked
    commits: list[dict] = field(default_factory=list)  # offset commit records read (3b)
    messages: list | None = None  # the master chunks' message arrays (or None)


def judge(tally: ScanTally, chunks: list[dict], damaged: list[dict] = ()) -> IntegrityResult:
    """Findings from the executors' rows (folded into ``tally``) for ``chunks``:
    their own issues and archive faults, then queue offset continuity across the chunks of each
    chain, judged here over the per-chunk first/last queue offsets. Only chunks whose records
    were checked (a count row) form chains: a chunk that could not be read is an archive fault,
    not a queue gap."""
    checked = tally.checked
    chain_of = {
        c["key"]: c["chain"] for c in assign_chains([c for c in chunks if c["key"] in checked])
    }
    issues = list(tally.issues) + list(damaged)  # and log_damage's rows
    chains: dict[tuple, list[tuple]] = {}
    for q in tally.queues:
        node, key, _start, topic, qid, _first, _last = q
        if key in chain_of:
            chains.setdefault((node, chain_of[key], topic, qid), []).append(q)
    for (node, _chain, topic, qid), qs in sorted(chains.items(), key=lambda kv: str(kv[0])):
        qs.sort(key=lambda q: q[2])
        for prev, cur in zip(qs, qs[1:], strict=False):
            if cur[5] != prev[6] + 1:
                issues.append(_queue_gap(node, topic, qid, prev, cur))
    issues.sort(key=lambda i: (i["node"], i["offset"]))
    return IntegrityResult(
        issues,
        int(tally.records),
        float(tally.check_s),
        float(tally.check_cpu_s),
        list(tally.faults),
        checked,
        list(tally.commits),
        list(tally.messages),
    )


def _queue_gap(node: str, topic: str, qid: int, prev: tuple, cur: tuple) -> dict:
    """The ``queue_offset_gap`` issue between two chunks' queue rows of one chain."""
    _n, key, start, _t, _q, first, _last = cur
    last = prev[6]
    return {
        **dict.fromkeys(ISSUE_FIELDS),
        "node": node,
        "offset": start,
        "check": "queue_offset_gap",
        "key": key,
        "topic": topic,
        "queue_id": qid,
        "queue_offset": first,
        "expected": str(last + 1),
        "found": str(first),
        "detail": f"topic {topic} queue {qid}: expected queue offset {last + 1}, found "
        f"{first} in the chunk starting at {start} (the previous chunk ends the queue at "
        f"{last})",
    }
