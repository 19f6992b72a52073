"""Archive retention: ``haproof archive prune --before T`` and the horizon marker the audit reads.

Brokers delete old commit log files (RocketMQ's ``fileReservedTime``, 72 h by default) and an
archive kept for years expires too. A prune deletes, per node of a group, whole chunks (log and
manifest) whose newest record is older than ``T``, and snapshots and events taken before ``T``;
it first writes ``ROOT/v1/{cluster}/{brokerName}/_retention.json``::

    {"version": 1, "before": T_ms, "prunedAt": ms, "nodes": {node: {"expiredBelow": offset}}}

so an audit reports the history below each node's ``expiredBelow`` as ``expired``, never as
``missing`` (also when the prune was interrupted half-way: the marker comes first). The marker
only moves forward. Only history a passing audit has verified is pruned (the group's
``_audit/state.json``: chunks up to each node's verified end, snapshots and events up to the
newest snapshot it judged); the rest is kept and counted, unless ``--unaudited`` is given. Chunks are visited in key (offset) order and the walk of a node
stops at its first chunk not older than ``T``, so a prune never deletes a newer chunk because of
an older one behind it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from contracts import archive_layout as layout
from contracts.audit_state import read_verified
from contracts.errors import ArchiveError, ObjectNotFoundError
from contracts.read_limits import MAX_JSON_DOC_BYTES, load_json_doc
from contracts.retention import Horizon, read_horizon, retention_key


@dataclass
class PruneResult:
    broker_name: str
    horizon: Horizon
    deleted: int = 0  # objects deleted
    kept_unaudited: int = 0  # nodes' folders where objects older than T were kept: unaudited


def _verified(store, cluster: str, broker_name: str) -> tuple[dict[str, int], int]:
    """(per node verified log end, newest snapshot time judged) of the group's audit state."""
    key = layout.audit_state_key(cluster, broker_name)
    try:
        done = read_verified(load_json_doc(store.get(key, MAX_JSON_DOC_BYTES), key))
    except ObjectNotFoundError:
        return {}, -1
    except ValueError as exc:
        raise ArchiveError(f"{store.root}/{key}: unreadable audit state: {exc}") from exc
    return done.ends, done.last_snapshot_at_ms


def _expired_chunks(store, prefix: str, before_ms: int, verified_end: int | None):
    """(log key, manifest key, end) of the leading chunks older than ``before_ms``, and how many
    older ones were kept because they end beyond ``verified_end`` (None: no audit needed)."""
    out, kept = [], 0
    for info in store.list(prefix + layout.COMMITLOG):
        parsed = layout.parse_key(info.key)
        if parsed is None or parsed.kind != "manifest":
            continue
        man = layout.ChunkManifest.from_json(store.get(info.key), what=info.key)
        newest = man.lastStoreTs or man.uploadedAt
        if newest >= before_ms:
            break
        if verified_end is not None and man.end > verified_end:
            kept += 1
            break
        out.append((info.key[: -len(".json")] + ".log", info.key, man.end))
    return out, kept


def prune_group(
    store,
    cluster: str,
    broker_name: str,
    before_ms: int,
    *,
    unaudited: bool = False,
    dry_run: bool = False,
    now_ms: int | None = None,
) -> PruneResult:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if before_ms > now_ms:
        raise ArchiveError(f"--before {before_ms} is in the future (now {now_ms})")
    old = read_horizon(store, cluster, broker_name)
    horizon = Horizon(max(before_ms, old.before_ms if old else 0), {}, now_ms)
    if old:
        horizon.expired_below.update(old.expired_below)
    verified, judged_ms = (None, before_ms) if unaudited else _verified(store, cluster, broker_name)
    result = PruneResult(broker_name, horizon)
    plan: list[str] = []
    group = layout.group_prefix(cluster, broker_name)
    for node_prefix in store.list_prefixes(group):
        node = node_prefix[len(group) :].rstrip("/")
        if node.startswith("_"):
            continue
        chunks, kept = _expired_chunks(
            store, node_prefix, before_ms, None if verified is None else verified.get(node, 0)
        )
        result.kept_unaudited += kept
        for log_key, man_key, end in chunks:
            plan += [log_key, man_key]  # the log first: a leftover manifest is below the mark
            horizon.expired_below[node] = max(horizon.expired_below.get(node, 0), end)
        for folder, what in ((layout.SNAPSHOTS, "snapshot"), (layout.EVENTS, "event")):
            for info in store.list(node_prefix + folder):
                parsed = layout.parse_key(info.key)
                if parsed is None or parsed.kind != what:
                    continue
                if parsed.at_ms >= before_ms:
                    break  # keys sort by time
                if parsed.at_ms > judged_ms:
                    result.kept_unaudited += 1  # no passing audit has judged it yet
                    break
                plan.append(info.key)
    if dry_run:
        result.deleted = len(plan)
        return result
    store.put_mutable(retention_key(cluster, broker_name), horizon.to_json())  # marker first
    for key in plan:
        store.delete(key)
    result.deleted = len(plan)
    return result
