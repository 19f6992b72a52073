"""The group's audit state document, ``ROOT/v1/{cluster}/{brokerName}/_audit/state.json``
(key: ``contracts.archive_layout.audit_state_key``): its field names and what a broker reads.

The audit (``spark_jobs/incremental.py``) owns the whole document and writes it after a passing
run. A broker reads only what it needs to prune (``broker/archive/retention.py``): per node the
end of the log a passing audit verified, and the store time of the newest snapshot it judged.
Both fields mean the same in every version of the document::

    {"version": 2, "verified": {node: log_end}, "lastSnapshotAt": ms, ...}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts import archive_layout as layout

#: the version the audit writes; version 1 (``objects``) is still read
STATE_VERSION = 2
STATE_VERSIONS_READ = (1, STATE_VERSION)

FIELD_VERSION = "version"
#: node -> end of the log a passing audit verified
FIELD_VERIFIED = "verified"
#: store time (ms) of the newest snapshot a passing audit judged; -1: none
FIELD_LAST_SNAPSHOT_AT = "lastSnapshotAt"


@dataclass(frozen=True)
class VerifiedEnds:
    """What a passing audit verified: per node log end, newest snapshot time judged."""

    ends: dict[str, int] = field(default_factory=dict)
    last_snapshot_at_ms: int = -1


def read_verified(doc: object) -> VerifiedEnds:
    """The verified ends of a parsed state document (version 1 or 2). ValueError saying what is
    wrong when ``doc`` is not such a document."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    version = doc.get(FIELD_VERSION)
    if version not in STATE_VERSIONS_READ:
        raise ValueError(f"unknown state version {version!r}")
    raw = doc.get(FIELD_VERIFIED, {})
    if not isinstance(raw, dict):
        raise ValueError(f"{FIELD_VERIFIED!r} is not an object")
    try:
        ends = {str(n): int(v) for n, v in raw.items()}
        last = int(doc.get(FIELD_LAST_SNAPSHOT_AT, -1))
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"malformed {FIELD_VERIFIED!r} or {FIELD_LAST_SNAPSHOT_AT!r}: {exc}"
        ) from exc
    return VerifiedEnds(ends, last)


def audit_lease_key(cluster: str, broker_name: str) -> str:
    """The group's audit lease beside its state, ``ROOT/v1/{cluster}/{brokerName}/_audit/
    lease.json`` (written by ``spark_jobs/lease.py``): one audit of a group at a time."""
    return f"{layout.group_prefix(cluster, broker_name)}{layout.AUDIT_DIR}/lease.json"
