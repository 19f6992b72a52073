"""Failovers found in the archive: what starts an incident audit.

A broker node ships its events (``v1/{cluster}/{group}/{node}/events/.../{atMs}-{kind}.json``,
``contracts.archive_layout``) beside its log. A failover shows there as ``role_changed`` (a
promotion or a demotion) or ``master_lost`` (a slave that lost its master, before an election).
:class:`FailoverScan` lists, each time it is asked, only the event keys after the newest one it
saw per node (``StartAfter``: a few small listings whatever the archive's age), and answers one
:class:`Incident` per group whose nodes logged a failover kind since: the group, the earliest
such event, and the audit window around it (from ``before_ms`` before it, to the present).

It starts from a time (``start_ms``): events before it are history, not incidents. Nothing of
Airflow here; the trigger that polls it is ``pipeline/incident_trigger.py``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

from contracts import archive_layout as layout

log = logging.getLogger(__name__)

FAILOVER_KINDS = ("role_changed", "master_lost")
#: the audit window starts this long before the failover (the tail the old master shipped)
DEFAULT_BEFORE_MS = 15 * 60 * 1000


@dataclass(frozen=True)
class Incident:
    cluster: str
    broker_name: str
    at_ms: int  # the earliest failover event of this poll
    kinds: tuple[str, ...]
    keys: tuple[str, ...]  # the event objects (at most a few per failover)
    since_ms: int  # audit window start

    def to_json(self) -> dict:
        doc = asdict(self)
        doc["kinds"], doc["keys"] = list(self.kinds), list(self.keys)
        return doc


@dataclass
class FailoverScan:
    store: object
    cluster: str
    start_ms: int
    kinds: tuple[str, ...] = FAILOVER_KINDS
    before_ms: int = DEFAULT_BEFORE_MS
    #: node events prefix -> the newest key listed (where the next listing resumes)
    marks: dict[str, str] = field(default_factory=dict)

    def _start_after(self, group: str, node: str) -> str:
        prefix = layout.node_prefix(self.cluster, group, node) + "events/"
        if prefix in self.marks:
            return self.marks[prefix]
        # events at or after start_ms: "{start_ms:013d}" sorts before "{start_ms:013d}-kind"
        first = layout.event_key(self.cluster, group, node, self.start_ms, self.kinds[0])
        return layout.resume_after(first, 13)

    def poll(self) -> list[Incident]:
        """The groups with failover events since the last poll, in group order."""
        out = []
        cluster_prefix = layout.cluster_prefix(self.cluster)
        for gp in self.store.list_prefixes(cluster_prefix):
            group = gp[len(cluster_prefix) :].rstrip("/")
            if group.startswith("_"):
                continue
            found = []
            for np_ in self.store.list_prefixes(gp):
                node = np_[len(gp) :].rstrip("/")
                if node == layout.AUDIT_DIR:
                    continue
                prefix = np_ + "events/"
                for info in self.store.list(prefix, start_after=self._start_after(group, node)):
                    self.marks[prefix] = info.key
                    parsed = layout.parse_key(info.key)
                    if parsed is None or parsed.kind != "event" or parsed.at_ms < self.start_ms:
                        continue
                    if parsed.event_kind in self.kinds:
                        found.append((parsed.at_ms, parsed.event_kind, info.key))
            if found:
                found.sort()
                at = found[0][0]
                out.append(
                    Incident(
                        cluster=self.cluster,
                        broker_name=group,
                        at_ms=at,
                        kinds=tuple(sorted({k for _, k, _ in found})),
                        keys=tuple(k for _, _, k in found),
                        since_ms=max(0, at - self.before_ms),
                    )
                )
        return out
