"""Audit outputs and what they mean: the one owner of verdict semantics (DESIGN.md section 4).

The Spark jobs judge with :func:`judge_checks`, the Great Expectations suites build their
expectations from the same constants (``FAILING_RANGE_VERDICTS``, ``EXCUSABLE_RANGE_VERDICTS``,
``DEFAULTS``) and the report reads ``CHECKS``/``STATUS_*``; nothing else restates a rule.

Range verdicts (replica consistency, per byte range of a pair ``master->node``):

=============  ==================================================================  ==========
verdict        meaning                                                             fails?
=============  ==================================================================  ==========
match          both sides were read and hold identical bytes                       no
lag            only the master has it yet, at the pair's tail                      if bytes >
                                                                                   max_lag_bytes
                                                                                   or not at tail
divergent      both hold it, bytes differ (``first_diff`` names the first offset)  yes
missing        a manifest or snapshot says the node had it, the archive lacks it   yes
extra          a node holds bytes its master never had                             yes, unless
               (allowed: an old master's unacknowledged tail after a recorded      ``allowed``
               failover)
conflict       two chunks of one node and epoch hold different bytes               yes
unverifiable   not enough archive to decide                                        no
expired        before the archive's retention horizon                              no
=============  ==================================================================  ==========
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# -- defaults -------------------------------------------------------------------------------

#: RocketMQ's haSlaveFallbehindMax: the most a slave may trail its master at the tail
DEFAULT_MAX_LAG_BYTES = 256 * 1024 * 1024

# -- range verdicts -------------------------------------------------------------------------

MATCH = "match"
LAG = "lag"
DIVERGENT = "divergent"
MISSING = "missing"
EXTRA = "extra"
CONFLICT = "conflict"
UNVERIFIABLE = "unverifiable"
EXPIRED = "expired"

RANGE_VERDICTS = (MATCH, LAG, DIVERGENT, MISSING, EXTRA, CONFLICT, UNVERIFIABLE, EXPIRED)
#: verdicts that fail replica consistency (unless excused, see below)
FAILING_RANGE_VERDICTS = (DIVERGENT, MISSING, EXTRA, CONFLICT)
#: failing verdicts a row may be excused from by its ``allowed`` column: only ``extra``, and the
#: audit sets ``allowed`` only for an old master's tail above every acknowledged offset after a
#: recorded failover
EXCUSABLE_RANGE_VERDICTS = (EXTRA,)

# -- checks and their statuses --------------------------------------------------------------

REPLICA_CONSISTENCY = "replica_consistency"
ACKNOWLEDGED_DURABILITY = "acknowledged_durability"
LOG_INTEGRITY = "log_integrity"
OFFSET_MONOTONICITY = "offset_monotonicity"
ARCHIVE_INTEGRITY = "archive_integrity"
CHECKS = (
    ARCHIVE_INTEGRITY,
    REPLICA_CONSISTENCY,
    ACKNOWLEDGED_DURABILITY,
    LOG_INTEGRITY,
    OFFSET_MONOTONICITY,
)
CHECK_TITLES = {
    ARCHIVE_INTEGRITY: "every archived object is present and matches its manifest",
    REPLICA_CONSISTENCY: "every slave log matches its master",
    ACKNOWLEDGED_DURABILITY: "no acknowledged byte was lost",
    LOG_INTEGRITY: "every record is intact",
    OFFSET_MONOTONICITY: "no committed consumer offset went backwards",
}

#: informational checks: they count, and fail only past a threshold the run sets; without one
#: they pass (what they counted is in verdict.json), so they never change a run's headline
DELIVERY = "delivery"
INFORMATIONAL_CHECKS = (DELIVERY,)
CHECK_TITLES[DELIVERY] = "duplicates and redeliveries (informational unless a threshold is set)"

STATUS_PASS = "pass"
STATUS_FAIL = "fail"
STATUS_NO_EVIDENCE = "no_evidence"

#: a run's headline: FAILED when a check failed, NO_EVIDENCE when none failed but one had
#: nothing to judge, PASSED only when every check passed on evidence
RUN_PASSED = "PASSED"
RUN_FAILED = "FAILED"
RUN_NO_EVIDENCE = "NO_EVIDENCE"

# -- archive faults (check archive_integrity) -----------------------------------------------

FAULT_LOG_MISSING = "log_missing"  # a chunk's .log absent under its manifest
FAULT_SIZE_MISMATCH = "size_mismatch"  # object shorter or longer than its manifest says
FAULT_SHA256_MISMATCH = "sha256_mismatch"  # bytes differ from the manifest's sha256
FAULT_BAD_JSON = "bad_json"  # manifest, snapshot or event that is not valid JSON
FAULT_BAD_FIELDS = "bad_fields"  # valid JSON lacking fields or with wrong types
FAULT_MANIFEST_MISSING = "manifest_missing"  # a .log without its manifest
FAULT_UNREADABLE = "unreadable"  # access denied, vanished between listing and reading, I/O error
FAULT_UNKNOWN_KEY = (
    "unknown_key"  # an object in a node's folders whose key the layout does not name
)
FAULT_KINDS = (
    FAULT_LOG_MISSING,
    FAULT_SIZE_MISMATCH,
    FAULT_SHA256_MISMATCH,
    FAULT_BAD_JSON,
    FAULT_BAD_FIELDS,
    FAULT_MANIFEST_MISSING,
    FAULT_UNREADABLE,
    FAULT_UNKNOWN_KEY,
)

# -- tables ---------------------------------------------------------------------------------

#: Columns of each Parquet table under ``audits/{runId}/{brokerName}/``, with the pandas dtype
#: an empty table gets. Every table is written with exactly these columns.
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "ranges": {
        "pair": "object",  # "master->node"
        "master": "object",
        "node": "object",
        "start": "int64",
        "end": "int64",
        "bytes": "int64",
        "verdict": "object",
        "allowed": "bool",  # an excused failing verdict (see EXCUSABLE_RANGE_VERDICTS)
        "lag_exceeded": "bool",  # a lag range beyond max_lag_bytes or not at the tail
        "first_diff": "float64",  # first differing offset of a divergent/conflict range
        "detail": "object",
    },
    "records_issues": {
        "node": "object",
        "offset": "int64",  # physical offset of the record (or of the chunk for a gap)
        "check": "object",
        "key": "object",  # the archive object holding it
        "topic": "object",
        "queue_id": "float64",
        "queue_offset": "float64",
        "msg_id": "object",
        "expected": "object",
        "found": "object",
        "detail": "object",
    },
    "archive_faults": {
        "node": "object",
        "key": "object",
        "kind": "object",  # one of FAULT_KINDS
        "start": "float64",  # the byte range the object should hold (null for JSON docs)
        "end": "float64",
        "detail": "object",
    },
    "acked_losses": {
        "kind": "object",
        "slave": "object",
        "lost_start": "int64",
        "lost_end": "int64",
        "ack": "int64",
        "verdict": "object",
        "snapshot": "object",  # the snapshot key that promised the bytes
        "detail": "object",  # e.g. an election's candidates that held the bytes
    },
    "offset_timeline": {
        "taken_at": "int64",
        "node": "object",
        "role": "object",
        "epoch": "int64",
        "group_name": "object",
        "topic": "object",
        "queue_id": "int64",
        "committed": "int64",
        "queue_max": "float64",  # null when the snapshot has no max for the queue
    },
    "offset_violations": {
        "kind": "object",  # regression | lost | beyond_queue_max
        "evidence": "object",  # records (commit records, section 3b) | snapshots
        "group_name": "object",
        "topic": "object",
        "queue_id": "int64",
        "before": "int64",
        "node_before": "object",
        "epoch_before": "int64",
        "at_before": "int64",
        "after": "int64",
        "node_after": "object",
        "epoch_after": "int64",
        "at_after": "int64",
        "log_offset_before": "float64",  # physical offsets of the two commit records (records)
        "log_offset_after": "float64",
        "failover": "object",
        "reconsumed_messages": "int64",
    },
    "checks": {
        "check": "object",
        "status": "object",  # pass | fail | no_evidence
        "findings": "int64",
        "evidence": "int64",  # how many things were judged (bytes compared, records, points)
        "reason": "object",
    },
}
TABLES = tuple(TABLE_COLUMNS)


def range_fails(verdict: str, allowed: bool = False, lag_exceeded: bool = False) -> bool:
    """Whether a ``ranges`` row fails replica consistency."""
    if verdict == LAG:
        return bool(lag_exceeded)
    if verdict in FAILING_RANGE_VERDICTS:
        return not (allowed and verdict in EXCUSABLE_RANGE_VERDICTS)
    return False


# -- judging --------------------------------------------------------------------------------


@dataclass
class CheckResult:
    check: str
    status: str
    findings: int
    evidence: int
    reason: str = ""
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == STATUS_PASS

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.check,
            "status": self.status,
            "passed": self.status != STATUS_FAIL,
            "findings": self.findings,
            "evidence": self.evidence,
            "detail": self.reason,
            "counts": self.counts,
        }


def check_status(findings: int, evidence: int) -> str:
    """A check fails on any finding; with no finding it passes only on evidence."""
    if findings:
        return STATUS_FAIL
    return STATUS_PASS if evidence > 0 else STATUS_NO_EVIDENCE


def delivery_status(
    duplicated: int,
    redelivered: int,
    enqueued: int,
    max_duplicated: int | None = None,
    max_redelivered: int | None = None,
) -> str:
    """The ``delivery`` check: fails when a threshold is set and exceeded; with a threshold and
    nothing stored it had no evidence; without a threshold it only counts (pass)."""
    limits = [(duplicated, max_duplicated), (redelivered, max_redelivered)]
    if any(limit is not None and n > limit for n, limit in limits):
        return STATUS_FAIL
    if all(limit is None for _n, limit in limits):
        return STATUS_PASS
    return STATUS_PASS if enqueued > 0 else STATUS_NO_EVIDENCE


#: a check's status as a run status: the run is what its worst check is
_RUN_OF_CHECK = {STATUS_PASS: RUN_PASSED, STATUS_NO_EVIDENCE: RUN_NO_EVIDENCE,
                 STATUS_FAIL: RUN_FAILED}  # fmt: skip
#: run statuses from best to worst: combining runs keeps the worst
_RUN_SEVERITY = (RUN_PASSED, RUN_NO_EVIDENCE, RUN_FAILED)


def combine_runs(run_statuses: list[str]) -> str:
    """The status of several runs (or groups) together: FAILED if any failed, else
    NO_EVIDENCE if any had none, else PASSED (also for no run at all)."""
    worst = RUN_PASSED
    for status in run_statuses:
        if status not in _RUN_SEVERITY:
            raise ValueError(f"unknown run status {status!r}")
        worst = max(worst, status, key=_RUN_SEVERITY.index)
    return worst


def run_status(statuses: list[str]) -> str:
    """A run's headline from its checks' statuses: the worst of them (see combine_runs)."""
    unknown = [s for s in statuses if s not in _RUN_OF_CHECK]
    if unknown:
        raise ValueError(f"unknown check status {unknown[0]!r}")
    return combine_runs([_RUN_OF_CHECK[s] for s in statuses])


def run_passed(status: str, require_evidence: bool) -> bool:
    """Whether a run with headline ``status`` passes (exit 0): NO_EVIDENCE passes unless the
    run requires evidence (``--require-evidence``, on in the nightly DAG)."""
    if status == RUN_FAILED:
        return False
    return not (require_evidence and status == RUN_NO_EVIDENCE)
