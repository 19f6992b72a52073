"""Controller mode's elections, judged under acknowledged durability: an election must pick a
node holding every byte the group had acknowledged before it. The controller's records
(``contracts/controller_archive.py``: ``elected`` with the candidates it saw, ``election_failed``,
``sync_state_set_changed``) are read from the group's ``_controller/events/`` folder; each one
is a row of the report's timeline (``elections`` in ``verdict.json``), as are the masters' own
events of controller mode (``sync_state_set_changed`` as applied, ``lease_lost``).

What was acknowledged before an election at ``at`` with ``masterEpoch`` E: the highest promise
of a master snapshot of an earlier epoch taken by then (its ``confirmOffset``, its slaves' ack
offsets: ``acked_durability.promises_made``), and the ``confirmOffset`` any candidate reported
to the controller. What the elected node held: its ``maxOffset`` as the controller saw it, or,
when its archive shows more (the node whose ``role_changed`` event names it master in epoch E),
the end of its chunks of earlier epochs. An election whose new master held less is an
``elected_without_acked_bytes`` loss naming the candidates that held the acknowledged bytes;
clean or unclean alike (unclean only says the controller was allowed to look outside the set).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from contracts import archive_layout as layout
from contracts import audit_tables as T
from contracts.controller_archive import (
    controller_events_prefix,
    parse_controller_event,
    parse_controller_key,
)
from spark_jobs.acked_durability import promises_made
from spark_jobs.archive_reader import GroupArchive, _fetch, fault, io_pool

CONTROLLER_NODE = "_controller"  # how archive faults name the controller's folder
MASTER_ROLES = ("SYNC_MASTER", "ASYNC_MASTER")
TIMELINE_MAX = 1_000  # timeline rows in verdict.json (the newest)
MASTER_EVENT_KINDS = ("sync_state_set_changed", "lease_lost")  # archived by the node itself


@dataclass
class ElectionsJudged:
    losses: list[dict] = field(default_factory=list)  # acked_losses rows
    faults: list[dict] = field(default_factory=list)  # archive_faults rows
    timeline: list[dict] = field(default_factory=list)  # verdict.json "elections"
    judged: int = 0  # elections judged against a promise (the check's evidence)


def load_records(store, cluster: str, broker_name: str) -> tuple[list[dict], list[dict]]:
    """The group's controller records, oldest first, and the archive faults met reading them
    (an object that does not parse is a finding, never a crash)."""
    faults: list[dict] = []
    keys = []
    for info in store.list(controller_events_prefix(cluster, broker_name)):
        if parse_controller_key(info.key) is None:
            faults.append(
                fault(
                    CONTROLLER_NODE,
                    info.key,
                    T.FAULT_UNKNOWN_KEY,
                    "a key the controller's archive layout does not name",
                )
            )
        else:
            keys.append(info.key)
    records = []
    for key, body in zip(keys, io_pool().map(lambda k: _fetch(store, k), keys), strict=True):
        if isinstance(body, Exception):
            faults.append(
                fault(CONTROLLER_NODE, key, T.FAULT_UNREADABLE, f"cannot be read: {body}")
            )
            continue
        try:
            records.append(parse_controller_event(json.loads(body), key))
        except (ValueError, UnicodeDecodeError) as exc:  # LayoutError is a ValueError
            kind = T.FAULT_BAD_FIELDS if isinstance(exc, layout.LayoutError) else T.FAULT_BAD_JSON
            faults.append(fault(CONTROLLER_NODE, key, kind, str(exc)))
    records.sort(key=lambda r: (r["at"], r.get("syncStateSetEpoch", 0)))
    return records, faults


def judge_elections(store, ga: GroupArchive) -> ElectionsJudged:
    """Read the group's controller records and judge every election (see the module's text)."""
    records, faults = load_records(store, ga.cluster, ga.broker_name)
    out = ElectionsJudged(faults=faults)
    made = promises_made(ga)
    for rec in records:
        out.timeline.append(timeline_row(rec))
        if rec["kind"] != "elected":
            continue
        acked, promise = acked_before(made, rec)
        if acked <= 0:
            continue  # nothing acknowledged before it: nothing to lose
        out.judged += 1
        loss = election_loss(ga, rec, acked, promise)
        if loss is not None:
            out.losses.append(loss)
    for na in ga.nodes.values():  # a master's own: SyncStateSet changes applied, lease expiries
        out.timeline += [timeline_row(e) for e in na.events if e["kind"] in MASTER_EVENT_KINDS]
    out.timeline.sort(key=lambda r: r["at"])
    out.timeline = out.timeline[-TIMELINE_MAX:]
    return out


def acked_before(made: list[tuple[int, int, str, int]], rec: dict) -> tuple[int, str]:
    """The highest acknowledged offset before the election, and what promised it."""
    best, source = 0, ""
    for ack, at, snapshot, epoch in made:
        if at <= rec["at"] and epoch < rec["masterEpoch"] and ack > best:
            best, source = ack, snapshot
    for cand in rec["candidates"]:
        if cand["confirmOffset"] > best:
            best = cand["confirmOffset"]
            source = f"confirmOffset {best} reported by {cand['node']} to the controller"
    return best, source


def elected_node(ga: GroupArchive, rec: dict) -> str | None:
    """The archive node that became master in the election's epoch (its role_changed event)."""
    for na in ga.nodes.values():
        for ev in na.events:
            if (
                ev["kind"] == "role_changed"
                and ev.get("to") in MASTER_ROLES
                and ev["epoch"] == rec["masterEpoch"]
                and ev["at"] >= rec["at"]
            ):
                return na.node
    return None


def election_loss(ga: GroupArchive, rec: dict, acked: int, promise: str) -> dict | None:
    """An ``acked_losses`` row when the elected node held less than ``acked``."""
    chosen = [c for c in rec["candidates"] if c["brokerId"] == rec["brokerId"]]
    held = max((c["maxOffset"] for c in chosen), default=0)
    node = elected_node(ga, rec)
    if node is not None:
        older = [c["end"] for c in ga.nodes[node].chunks if c["epoch"] < rec["masterEpoch"]]
        held = max([held, *older])
    if held >= acked:
        return None
    holders = [c["node"] for c in rec["candidates"] if c["maxOffset"] >= acked]
    who = f"{rec['node']} ({node})" if node else rec["node"]
    return {
        "kind": "elected_without_acked_bytes",
        "slave": node or rec["node"],
        "lost_start": held,
        "lost_end": acked,
        "ack": acked,
        "verdict": "unclean_election" if rec.get("unclean") else "election",
        "snapshot": promise,
        "detail": (
            f"masterEpoch {rec['masterEpoch']} at {rec['at']}: elected {who} holding "
            f"{held} bytes; candidates holding the acknowledged bytes: "
            + (", ".join(holders) if holders else "none")
        ),
    }


def timeline_row(rec: dict) -> dict:
    """One row of the report's timeline for a controller record."""
    row = {
        "at": rec["at"],
        "kind": rec["kind"],
        "node": rec["node"],
        "masterEpoch": rec.get("masterEpoch", rec["epoch"]),
    }
    if rec["kind"] == "sync_state_set_changed":
        row.update(members=rec["members"], syncStateSetEpoch=rec["syncStateSetEpoch"])
    elif rec["kind"] == "lease_lost":
        row.update(lastContactAt=rec["lastContactAt"])
    else:
        row.update(
            unclean=bool(rec.get("unclean", False)),
            syncStateSetEpoch=rec.get("syncStateSetEpoch"),
            candidates=[
                {
                    k: c[k]
                    for k in (
                        "node",
                        "brokerId",
                        "epoch",
                        "maxOffset",
                        "confirmOffset",
                        "priority",
                        "inSyncStateSet",
                        "alive",
                    )
                }
                for c in rec["candidates"]
            ],
        )
    return row
