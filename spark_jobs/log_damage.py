"""Check 3, log integrity, judging a node's ``log_damaged`` events (``contracts/log_events.py``):
shipping stopped at structural damage in that node's log, so its archive ends there. Without
the event such a node looks like one that lags (replica consistency judges the shipped prefix
and passes); with it, log integrity fails naming the group, the node, the offset and the
reason, and says how much of the node's log the replica comparison covered. A node whose
archive only ends early, with no such event, is judged as before (lag).
"""

from __future__ import annotations

from contracts import archive_layout as layout
from contracts import audit_tables as T
from contracts.log_events import LOG_DAMAGED
from spark_jobs.log_integrity import ISSUE_FIELDS


def damage_issues(ga, ranges: list[dict]) -> list[dict]:
    """One ``records_issues`` row (check ``log_damaged``) per damaged offset a node's events
    name (the same offset recorded twice is one finding), in (node, offset) order."""
    out = []
    for node, na in sorted(ga.nodes.items()):
        seen: set[int] = set()
        for event in na.events:
            if event["kind"] != LOG_DAMAGED or event["offset"] in seen:
                continue
            seen.add(event["offset"])
            out.append(_issue(ga, na, event, coverage(node, ranges)))
    return out


def coverage(node: str, ranges: list[dict]) -> tuple[int, int | None]:
    """(bytes read on both sides and compared, the end of the highest such range) over the
    replica comparison's pairs ``node`` is in (None: nothing of it was compared)."""
    compared = [
        r
        for r in ranges
        if node in (r["node"], r["master"]) and r["verdict"] in (T.MATCH, T.DIVERGENT)
    ]
    return sum(r["bytes"] for r in compared), max((r["end"] for r in compared), default=None)


def _issue(ga, na, event: dict, covered: tuple[int, int | None]) -> dict:
    offset, reason = event["offset"], event["reason"]
    compared, upto = covered
    held = f"[{na.start}, {na.end})" if na.chunks else "nothing"
    said = f"{compared} byte(s) of it, up to offset {upto}" if upto is not None else "none of it"
    detail = (
        f"group {ga.broker_name}, node {na.node}: its log is damaged at offset {offset} "
        f"({reason}); shipping stopped there, so the archive holds {held} of its log and "
        f"nothing from {offset} on; the replica comparison covered {said}"
    )
    return {
        **dict.fromkeys(ISSUE_FIELDS),
        "node": na.node,
        "offset": offset,
        "check": LOG_DAMAGED,
        "key": _event_key(ga, na, event),
        "expected": "a record",
        "found": reason,
        "detail": detail,
    }


def _event_key(ga, na, event: dict) -> str:
    """The event's key as listed (revision 1 or 2), else the one the layout gives it."""
    name = f"{event['at']:013d}-{LOG_DAMAGED}.json"
    for key in na.event_keys:
        if key.endswith("/" + name):
            return key
    return layout.event_key(ga.cluster, ga.broker_name, na.node, event["at"], LOG_DAMAGED)
