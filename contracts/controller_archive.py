"""Where the controller's records live in the archive, and what a reader accepts of them.

The controller (``broker/controller/archiver.py``) is the one writer of its group's folder; the
audit (``spark_jobs/elections.py``) and the report read it::

    v1/{cluster}/{brokerName}/_controller/events/{T1}/{T2}/{atMs:013d}-{kind}-{digest}.json

``_controller`` cannot be a node's name (a node name starts with a letter or digit), so it never
collides with a node's folders; the bucket folders are a node's ``events/`` ones
(``archive_layout.TIME_BUCKETS``). ``digest`` is the first 12 hex digits of the document's
sha256: the same record shipped twice (by a restarted controller, or by a new Raft leader that
ships again what its predecessor may have shipped) has the same key and the same bytes, so
``put`` is a no-op; two different records of one kind in one millisecond get two keys.

Documents are archive events (``archive_layout.parse_event``) of the kinds the controller
records (``elected``, ``election_failed``, ``sync_state_set_changed``; fields in
``contracts/controller_events.py``); ``node`` and each candidate's ``node`` are broker
addresses as registered with the controller. Candidates are checked field by field here: the
audit judges elections by them.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from contracts import archive_layout as layout

CONTROLLER_DIR = "_controller"
#: kinds the controller writes under its folder (``lease_lost`` is the broker's own event)
CONTROLLER_KINDS = ("elected", "election_failed", "sync_state_set_changed")
_NAME_RE = re.compile(r"^(\d{13})-([a-z_]+)-([0-9a-f]{12})\.json$")
_CANDIDATE_FIELDS: dict[str, type] = {
    "node": str, "brokerId": int, "epoch": int, "maxOffset": int, "confirmOffset": int,
    "priority": int, "inSyncStateSet": bool, "alive": bool,
}  # fmt: skip


def controller_events_prefix(cluster: str, broker_name: str) -> str:
    return f"{layout.group_prefix(cluster, broker_name)}{CONTROLLER_DIR}/{layout.EVENTS}"


def controller_event_key(doc: dict[str, Any]) -> tuple[str, bytes]:
    """The key and the bytes of one controller record (``doc``: an event document)."""
    kind = doc.get("kind")
    if kind not in CONTROLLER_KINDS:
        raise layout.LayoutError(f"{kind!r} is not a controller record kind")
    at_ms = doc.get("at")
    if not isinstance(at_ms, int) or isinstance(at_ms, bool) or not 0 <= at_ms < 10**13:
        raise layout.LayoutError(f"controller record time {at_ms!r} does not fit 13 digits")
    data = layout.json_bytes(doc)
    digits = f"{at_ms:013d}"
    digest = hashlib.sha256(data).hexdigest()[:12]
    key = (
        f"{controller_events_prefix(doc['cluster'], doc['brokerName'])}"
        f"{layout.buckets(digits, layout.TIME_BUCKETS)}{digits}-{kind}-{digest}.json"
    )
    return key, data


def parse_controller_key(key: str) -> tuple[int, str] | None:
    """(atMs, kind) of a controller record's key; None for any other key."""
    parts = key.split("/")
    if len(parts) != 8 or parts[0] != layout.VERSION or parts[3:5] != [CONTROLLER_DIR, "events"]:
        return None
    m = _NAME_RE.match(parts[-1])
    if not m or m.group(2) not in CONTROLLER_KINDS:
        return None
    if "/".join(parts[5:7]) + "/" != layout.buckets(m.group(1), layout.TIME_BUCKETS):
        return None
    return int(m.group(1)), m.group(2)


def parse_controller_event(data: bytes | str | dict, key: str) -> dict[str, Any]:
    """A controller record read back: an event of a controller kind whose key names it, its
    candidates complete. Raises ``LayoutError`` naming the key and what is wrong."""
    named = parse_controller_key(key)
    if named is None:
        raise layout.LayoutError(f"{key}: not a controller record key")
    doc = layout.parse_event(data, what=key)
    if (doc["at"], doc["kind"]) != named:
        raise layout.LayoutError(f"{key}: document says {doc['kind']} at {doc['at']}")
    candidates = doc.get("candidates", [])
    if not isinstance(candidates, list):
        raise layout.LayoutError(f"{key}: candidates must be a list")
    for i, cand in enumerate(candidates):
        if not isinstance(cand, dict):
            raise layout.LayoutError(f"{key}: candidates[{i}] is not an object")
        for name, typ in _CANDIDATE_FIELDS.items():
            value = cand.get(name)
            if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
                raise layout.LayoutError(f"{key}: candidates[{i}].{name} is {value!r}")
    if doc["kind"] == "elected":
        for name in ("masterEpoch", "syncStateSetEpoch", "brokerId"):
            if not isinstance(doc.get(name), int) or isinstance(doc.get(name), bool):
                raise layout.LayoutError(f"{key}: elected.{name} is {doc.get(name)!r}")
    return doc
