"""What a shipper needs to resume, read from the newest end of a node's archive.

A node resumes shipping where its archive ends. Reading every manifest for that (a year at a
chunk every 70 s is ~450k GETs per node) makes start-up cost grow with the archive's age. The
start, end and epoch of a chunk are in its key and the bucket folders of layout revision 2 sort
in offset order, so the tail is found with a few delimiter listings, newest folder first:

* the latest ``truncated`` event: the node's ``events/`` top time buckets newest first,
  stopping at the first that holds one (one GET, for its epoch and ``to``);
* the chunks: leaf folders of ``commitlog/`` newest first, whole folders, until a chunk that
  counts (its epoch at or above the truncation's) or one that starts below the truncation
  point. Manifest bodies are read only for the role: the newest manifest of each epoch seen.

Why that suffices (the shipper's invariants): a node ships in offset order, every chunk carries
an epoch at or above every chunk shipped before it, and after a truncation it resumes at ``to``
under an epoch above every chunk before it. So the chunks that count form one chain whose newest
chunk holds both the highest end and the highest epoch; below ``to`` only older epochs remain;
and the epochs still to be shipped start at the epoch of the chunk where the archive ends.

Archives without bucket folders (layout revision 1, *flat* keys) and walks that run out of
bucket folders fall back to the full listing, which reads every layout exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from contracts import archive_layout as layout
from contracts.object_store import ObjectStore


@dataclass
class Tail:
    """What the archive says about where a node resumes."""

    end: int | None = None  # end of the archived log (None: nothing shipped yet)
    max_chunk_epoch: int = 0  # the highest epoch a chunk carries
    truncation: tuple[int, int] | None = None  # (epoch, to) of the latest truncated event
    master_epochs: dict[int, str] = field(default_factory=dict)  # epoch -> master role


def leaves_newest_first(store: ObjectStore, folder: str, depth: int) -> Iterator[str]:
    """The bucket folders ``depth`` levels below ``folder``, newest (highest) first: one
    delimiter listing per folder entered."""
    if depth == 0:
        yield folder
        return
    for sub in reversed(store.list_prefixes(folder)):
        yield from leaves_newest_first(store, sub, depth - 1)


def latest_truncation(store: ObjectStore, node_prefix: str) -> tuple[int, int] | None:
    """(epoch, to) of the node's newest ``truncated`` event, or None.

    By top-level time bucket (10^10 ms, ~116 days), newest first, stopping at the first that
    holds a truncation. Revision 1's flat events (no bucket folders) are older than every
    bucketed one, so they all sort before the oldest bucket folder: a node with no truncation
    in its bucket folders then lists from the start of ``events/`` up to its first bucketed
    key (on S3 one page; file:// reads the folders in full, O(events): a node writes an event
    per start, role change, truncation and offset reset, not per chunk)."""
    events = node_prefix + layout.EVENTS
    for folder in leaves_newest_first(store, events, 1):
        found = _newest_truncated([i.key for i in store.list(folder)])
        if found is not None:
            return _read_truncation(store, found)
    flat = []
    for info in store.list(events):
        if info.key.count("/") > events.count("/"):
            break  # the first bucketed key: no flat one sorts after it
        flat.append(info.key)
    found = _newest_truncated(flat)
    return None if found is None else _read_truncation(store, found)


def newest_snapshot_key(store: ObjectStore, node_prefix: str) -> str | None:
    """Key of the node's newest snapshot: the last key of its newest time bucket holding one
    (a few listings); the full listing when there are no bucket folders (revision 1's flat
    snapshots are older than every bucketed one)."""
    snapshots = node_prefix + layout.SNAPSHOTS
    for leaf in leaves_newest_first(store, snapshots, len(layout.TIME_BUCKETS)):
        keys = [i.key for i in store.list(leaf)]
        if keys:
            return keys[-1]
    keys = [i.key for i in store.list(snapshots)]
    return keys[-1] if keys else None


def _newest_truncated(keys: list[str]) -> str | None:
    for key in reversed(keys):
        if key.endswith("-truncated.json"):
            return key
    return None


def _read_truncation(store: ObjectStore, key: str) -> tuple[int, int]:
    doc = layout.parse_event(store.get(key), what=key)
    return int(doc["epoch"]), int(doc["to"])


def _manifest_keys(store: ObjectStore, folder: str) -> dict[layout.ParsedKey, str]:
    """The manifests listed under ``folder``, parsed, to their keys (in key order)."""
    out = {}
    for info in store.list(folder):
        parsed = layout.parse_key(info.key)
        if parsed is not None and parsed.kind == "manifest":
            out[parsed] = info.key
    return out


def read_tail(store: ObjectStore, node_prefix: str) -> Tail:
    """The node's :class:`Tail`: O(epochs) GETs and O(1) listings while the chunks that count
    end above every chunk cut by a truncation (always, once the log has grown past the cut)."""
    tail = Tail(truncation=latest_truncation(store, node_prefix))
    epoch_t, to = tail.truncation if tail.truncation is not None else (0, -1)
    keys: dict[layout.ParsedKey, str] = {}
    folder = node_prefix + layout.COMMITLOG
    done = False
    for leaf in leaves_newest_first(store, folder, len(layout.OFFSET_BUCKETS)):
        found = _manifest_keys(store, leaf)
        keys.update(found)
        done = any(p.epoch >= epoch_t or p.start < to for p in found)
        if done:
            break
    if not done:  # no bucket folders, or the walk ran out of them: every key, as listed
        keys = _manifest_keys(store, folder)
    seen = list(keys)
    counted = [p.end for p in seen if p.epoch >= epoch_t]
    tail.end = max(counted, default=None if tail.truncation is None else to)
    tail.max_chunk_epoch = max((p.epoch for p in seen), default=0)
    newest: dict[int, layout.ParsedKey] = {}
    for p in seen:  # key order within a folder; folders newest first
        if p.epoch not in newest or (p.start, p.end) > (newest[p.epoch].start, newest[p.epoch].end):
            newest[p.epoch] = p
    for epoch, p in sorted(newest.items()):
        man = layout.ChunkManifest.from_json(store.get(keys[p]), what=keys[p])
        if man.role != "SLAVE":
            tail.master_epochs[epoch] = man.role
    return tail
