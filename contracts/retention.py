"""The archive's retention marker: ``ROOT/v1/{cluster}/{brokerName}/_retention.json``.

``haproof archive prune`` (broker/archive/retention.py) writes it before deleting anything;
the audit (spark_jobs/expiry.py) reads it and reports history below the horizon as ``expired``::

    {"version": 1, "before": T_ms, "prunedAt": ms, "nodes": {node: {"expiredBelow": offset}}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from contracts import archive_layout as layout
from contracts.errors import ArchiveError, ObjectNotFoundError
from contracts.read_limits import MAX_JSON_DOC_BYTES, load_json_doc

MARKER_VERSION = 1


def retention_key(cluster: str, broker_name: str) -> str:
    return f"{layout.group_prefix(cluster, broker_name)}_retention.json"


@dataclass
class Horizon:
    before_ms: int
    expired_below: dict[str, int] = field(default_factory=dict)  # node -> log offset
    pruned_at_ms: int = 0

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": MARKER_VERSION,
                "before": self.before_ms,
                "prunedAt": self.pruned_at_ms,
                "nodes": {n: {"expiredBelow": o} for n, o in sorted(self.expired_below.items())},
            },
            sort_keys=True,
            indent=1,
        ).encode()


def read_horizon(store, cluster: str, broker_name: str) -> Horizon | None:
    """The group's retention marker, or None when it was never pruned."""
    key = retention_key(cluster, broker_name)
    try:
        doc = load_json_doc(store.get(key, MAX_JSON_DOC_BYTES), key)
        if doc.get("version") != MARKER_VERSION:
            raise ValueError(f"unknown version {doc.get('version')!r}")
        return Horizon(
            int(doc["before"]),
            {str(n): int(v["expiredBelow"]) for n, v in doc.get("nodes", {}).items()},
            int(doc.get("prunedAt", 0)),
        )
    except ObjectNotFoundError:
        return None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ArchiveError(f"{store.root}/{key}: unreadable retention marker: {exc}") from exc
