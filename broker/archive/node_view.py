"""What a node's archiver reads of the node, on the event loop: its flushed commit log as a
shipper source, its identity (the labels of events) and its snapshot documents (role, epoch,
offsets, the slaves' acks). ``NodeArchiver`` (``node_archiver.py``) ships them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from broker.archive.shipper import NodeIdentity
from broker.config import BrokerConfig
from broker.ha.role_services import RoleServices
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts import archive_layout as layout
from contracts.errors import ArchiveError


class LiveStoreSource:
    """The live store's commit log as a ``CommitLogSource``: only flushed bytes are shippable.
    The store framed every record itself, so the shipper chains frames without decoding them
    (the audit checks every record's CRC and fields)."""

    framing_trusted = True

    def __init__(self, store) -> None:
        self.store = store
        self.mapped_file_size = store.config.mapped_file_size_commit_log

    def min_offset(self) -> int:
        return self.store.commit_log.min_offset

    def shippable_end(self) -> int:
        return min(self.store.commit_log.flushed_offset, self.store.commit_log.max_offset)

    def file_view(self, file_start: int) -> memoryview:
        mf = self.store.commit_log.queue.find(file_start)
        if mf is None:
            raise ArchiveError(f"commit log file at {file_start} is gone")
        return memoryview(mf.buffer)


@dataclass(eq=False)
class NodeView:
    """The node as the archive describes it: ``role`` is the node's role state, ``replication``
    its role services (None: no HA, e.g. a bare store)."""

    store: MessageStore
    config: BrokerConfig
    role: BrokerRoleState
    node_name: str
    replication: RoleServices | None = None

    def identity(self) -> NodeIdentity:
        return NodeIdentity(
            cluster=self.config.broker_cluster_name,
            broker_name=self.config.broker_name,
            node=self.node_name,
            broker_id=self.role.broker_id,
            role=self.role.role.value,
            epoch=self.role.epoch,
        )

    def start_events(self) -> list[tuple[str, dict]]:
        """(name, fields) of what the archive learns at start: ``recovered`` after a crash and
        per quarantined range (store repair, slave refetch; each reported once), an
        ``offset_reset`` when started with --accept-offset-loss, then ``started``."""
        from broker.store.recovery import mark_reported

        store, events = self.store, []
        rec = store.recovery
        if rec is not None and rec.abnormal and rec.damage is None:
            events.append(("recovered", {"from": rec.found_end, "to": rec.valid_end}))
        cut = store.finished_cut  # a rejoin cut a crash interrupted
        if cut is not None:
            events.append(
                ("truncated", {"from": cut[1] if cut[1] is not None else cut[0], "to": cut[0]})
            )
        for q in store.quarantine_reports:
            refetch = q.get("action") == "refetch"
            end = store.max_phy_offset
            fields = {
                "from": q["end"] if refetch else end,  # the log end found / kept
                "to": q["start"] if refetch else end,
                "damagedFrom": q["start"],
                "damagedTo": q["end"],
                "action": q.get("action"),
                "quarantine": os.path.basename(q["file"]),
                "reason": q.get("reason", ""),
            }
            events.append(("recovered", fields))
            mark_reported(store.root, q["file"])
        store.quarantine_reports = []
        loss = store.consumer_offsets.accepted_loss
        if loss:  # started with --accept-offset-loss: every committed offset may have moved
            fields = {"group": "*", "topic": "*", "queue": -1, "from": -1, "to": -1}
            events.append(("offset_reset", {**fields, "reason": loss}))
        events.append(("started", {"role": self.role.role.value}))
        return events

    def snapshot(self, clock_ms: Callable[[], int]) -> layout.Snapshot:
        store = self.store
        max_off = store.max_phy_offset
        flushed = min(store.commit_log.flushed_offset, max_off)
        slaves: dict[str, int] = {}
        confirm = flushed
        ha = self.replication.ha if self.replication is not None else None
        if ha is not None:
            st = ha.status()
            confirm = min(st["confirmOffset"], max_off)
            for s in st["slaves"]:
                slaves[s.get("node") or s["addr"]] = s["ackOffset"]
        qmax: dict[str, dict[str, int]] = {}
        for (topic, qid), n in list(store.topic_queue_table.items()):
            qmax.setdefault(topic, {})[str(qid)] = int(n)
        offsets = store.consumer_offsets.to_json()
        return layout.Snapshot(
            node=self.node_name,
            brokerName=self.config.broker_name,
            brokerId=self.role.broker_id,
            role=self.role.role.value,
            epoch=self.role.epoch,
            takenAt=clock_ms(),
            maxPhyOffset=max_off,
            flushedOffset=flushed,
            confirmOffset=confirm,
            slaves=slaves,
            consumerOffsets=offsets["offsetTable"],
            queueMaxOffsets=qmax,
            delayOffsets={str(k): v for k, v in store.delay_offsets.table.items()},
            dataVersion=offsets["dataVersion"],
            mappedFileSize=self.config.mapped_file_size_commit_log,
        )


def epoch_ranges(entries, start: int, end: int, default_epoch: int):
    """``(from, to, epoch)`` covering ``[start, end)`` by the epoch file's entries (an entry
    holds from its start offset to the next one's); bytes before the first entry, or every byte
    when there are no entries, belong to epoch 0 (``default_epoch`` without entries)."""
    if start >= end:
        return
    if not entries:
        yield start, end, default_epoch
        return
    bounds = [(0, 0)] + [(e.start_offset, e.epoch) for e in entries]
    for i, (lo, epoch) in enumerate(bounds):
        hi = bounds[i + 1][0] if i + 1 < len(bounds) else end
        lo, hi = max(lo, start), min(hi, end)
        if lo < hi:
            yield lo, hi, epoch
