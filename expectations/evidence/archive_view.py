"""The group's archived snapshots and events, for the plots (replication lag, role changes).

Only the group's own prefixes are listed: ``v1/{cluster}/{brokerName}/{node}/snapshots/`` and
``.../events/`` for every node the audit outputs name (never the whole cluster, never the commit
log chunks). Keys and documents are parsed by ``contracts.archive_layout``; a document that does
not parse is counted in a note and skipped (the audit's archive_integrity check reports it).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from contracts import archive_layout as layout
from contracts.read_limits import MAX_JSON_DOC_BYTES

#: bounds: a plot is ~900 pixels wide, so more snapshots than this per node add GETs, not detail
#: (evenly spaced in time when there are more); events are few, the last MAX_EVENTS are read
MAX_SNAPSHOTS_PER_NODE = 1_500
MAX_EVENTS = 5_000
_READERS = 8


def audit_nodes(ev) -> list[str]:
    """Every node the audit's outputs name."""
    names: set[str] = set()
    v = ev.verdict or {}
    if isinstance(v.get("master"), str):
        names.add(v["master"])
    cols = {
        "ranges": ("master", "node"),
        "records_issues": ("node",),
        "archive_faults": ("node",),
        "acked_losses": ("slave",),
        "offset_timeline": ("node",),
        "offset_violations": ("node_before", "node_after"),
    }
    for table, fields in cols.items():
        for row in ev.tables[table].rows:
            for f in fields:
                if isinstance(row.get(f), str):
                    names.add(row[f])
    for row in ev.tables["ranges"].rows:
        pair = row.get("pair")
        if isinstance(pair, str) and "->" in pair:
            names.update(pair.split("->", 1))
    out = []
    for n in sorted(names):
        try:
            out.append(layout.check_name("node", n))
        except layout.LayoutError:
            continue  # a name we would not build a key from is not listed
    return out


def _in_window(at_ms: int, window: dict[str, Any]) -> bool:
    since, until = window.get("since"), window.get("until")
    if isinstance(since, int) and at_ms < since:
        return False
    return not (isinstance(until, int) and at_ms > until)


def _keys(store, cluster: str, broker_name: str, nodes: list[str]) -> list[layout.ParsedKey]:
    group = layout.group_prefix(cluster, broker_name)
    prefixes = [
        f"{group}{n}/{folder}" for n in nodes for folder in (layout.SNAPSHOTS, layout.EVENTS)
    ]
    if not prefixes:  # nothing names a node: fall back to the group's prefix
        prefixes = [group]
    found = []
    for prefix in prefixes:
        for info in store.list(prefix):
            parsed = layout.parse_key(info.key)
            if parsed is not None and parsed.kind in ("snapshot", "event"):
                found.append((info.key, parsed))
    return found


def _read(store, key: str, kind: str) -> dict[str, Any] | None:
    try:
        raw = store.get(key, MAX_JSON_DOC_BYTES)
        if kind == "snapshot":
            s = layout.Snapshot.from_json(raw, key)
            return {
                "node": s.node,
                "role": s.role,
                "epoch": s.epoch,
                "takenAt": s.takenAt,
                "maxPhyOffset": s.maxPhyOffset,
                "confirmOffset": s.confirmOffset,
                "slaves": {str(k): v for k, v in s.slaves.items() if isinstance(v, int)},
                "key": key,
            }
        doc = layout.parse_event(raw, key)
        return {**doc, "key": key}
    except (layout.LayoutError, ValueError, json.JSONDecodeError):
        return None
    except Exception:  # unreadable object: the audit's archive check names it
        return None


def spaced(snaps: list, ev) -> list:
    """At most MAX_SNAPSHOTS_PER_NODE snapshots per node, evenly spaced in time."""
    by_node: dict[str, list] = {}
    for kp in sorted(snaps, key=lambda kp: kp[1].at_ms):
        by_node.setdefault(kp[1].node, []).append(kp)
    out = []
    for node, items in sorted(by_node.items()):
        if len(items) > MAX_SNAPSHOTS_PER_NODE:
            last, want = len(items) - 1, MAX_SNAPSHOTS_PER_NODE - 1
            picked = [items[round(i * last / want)] for i in range(want + 1)]  # first and last
            ev.archive_notes.append(
                f"{node}: {len(items):,} snapshots in the window; the lag plot reads "
                f"{len(picked):,} of them, evenly spaced"
            )
            items = picked
        out.extend(items)
    return out


def load_history(store, ev) -> None:
    """Fill ``ev.snapshots`` and ``ev.events`` (sorted by time) or say why not."""
    cluster = ev.cluster
    if not isinstance(cluster, str):
        ev.archive_notes.append("no cluster in verdict.json: snapshots and events not read")
        return
    window = (ev.verdict or {}).get("window") or {}
    try:
        keys = _keys(store, cluster, ev.broker_name, audit_nodes(ev))
    except layout.LayoutError as exc:
        ev.archive_notes.append(f"archive not read: {exc}")
        return
    except Exception as exc:
        ev.archive_notes.append(f"archive listing failed: {type(exc).__name__}: {exc}")
        return
    snaps = [(k, p) for k, p in keys if p.kind == "snapshot" and _in_window(p.at_ms, window)]
    events = [(k, p) for k, p in keys if p.kind == "event" and _in_window(p.at_ms, window)]
    snaps = spaced(snaps, ev)
    if len(events) > MAX_EVENTS:
        ev.archive_notes.append(f"{len(events)} events in the window: the last {MAX_EVENTS} read")
        events = sorted(events, key=lambda kp: kp[1].at_ms)[-MAX_EVENTS:]
    with ThreadPoolExecutor(_READERS) as pool:
        s_docs = list(pool.map(lambda kp: _read(store, kp[0], "snapshot"), snaps))
        e_docs = list(pool.map(lambda kp: _read(store, kp[0], "event"), events))
    bad = sum(d is None for d in s_docs + e_docs)
    if bad:
        ev.archive_notes.append(f"{bad} snapshot/event document(s) unreadable or invalid: skipped")
    ev.snapshots = sorted((d for d in s_docs if d), key=lambda d: (d["takenAt"], d["node"]))
    ev.events = sorted((d for d in e_docs if d), key=lambda d: (d["at"], d["node"]))
