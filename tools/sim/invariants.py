"""The invariants the simulation checks, after every step, periodically, and at the end.

- ``ack-durable``: when a SYNC_MASTER answers SEND_OK (SYNC_FLUSH everywhere), the message's
  bytes are flushed on the master and on at least one other node.
- ``ack-lost``: every acknowledged message is in the final master's log, byte for byte, at the
  offset it was acknowledged at (controller-mode nodes run ``allAckInSyncStateSet``; the
  operator promotes only the most advanced node once every node is up).
- ``read-lost``: in controller mode, every record a consumer read (up to the master's
  confirmOffset) is in the final master's log at the offset it was read at.
- ``one-master-per-epoch``: no two nodes are ever master under the same epoch.
- ``two-writers``: no node accepts a write after the controller elected another node under a
  newer epoch (the master lease must have fenced it first).
- ``epoch-monotonic``: the controller's master epoch never goes down (without a controller: a
  node's epoch never goes down, restarts included).
- ``log-matching``: a replica that shares the master's epochs holds the master's bytes.
- ``truncation-acked``: a truncation never removes an acknowledged byte the master does not
  hold (one it holds is counted as ``needless_cuts``).
- ``epoch-reused``: a restarted controller never elects under an epoch it handed out before
  (its journal holds every election it answered).
- ``offset-regressed``: QUERY_CONSUMER_OFFSET never answers a queue less than it answered
  before, across crashes and elections (committed consumer offsets never go backwards).
- ``restart-failed`` / ``no-convergence``: a node that cannot start again, a group that does not
  come back to one master with caught-up slaves once faults stop.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


class Violation(Exception):
    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail

    def __reduce__(self):  # back from a worker process
        return (Violation, (self.name, self.detail))


@dataclass(frozen=True)
class Ack:
    seq: int
    offset: int
    size: int
    crc: int
    node: str
    epoch: int

    @property
    def end(self) -> int:
        return self.offset + self.size


def log_bytes(store, start: int, end: int) -> bytes:
    out = bytearray()
    pos = start
    while pos < end:
        chunk = store.commit_log.read(pos, end - pos)
        if not chunk:
            break
        out += chunk
        pos += len(chunk)
    return bytes(out)


class Checker:
    def __init__(self) -> None:
        self.acks: list[Ack] = []
        self.reads: dict[int, tuple[int, int]] = {}  # offset -> (end, crc) of records read
        self.reads_lost = 0
        self.masters: dict[int, str] = {}  # epoch -> the node that was master under it
        self.epochs: dict[str, int] = {}  # node or "controller" -> highest epoch seen
        self.node_epochs_monotonic = True
        self.needless_cuts = 0  # acknowledged bytes cut from a replica while the master has them
        self.offsets: dict[int, tuple[int, str, float]] = {}  # queue -> highest answer, where, when

    def on_ack(self, ack: Ack, nodes, disk) -> None:
        """At the moment of the answer: the message is on two disks (SYNC_MASTER over
        SYNC_FLUSH), byte for byte, by the disk model."""
        holders = [
            s.name for s in nodes if zlib.crc32(s.durable(disk, ack.offset, ack.end)) == ack.crc
        ]
        self.acks.append(ack)
        if len(holders) < 2:
            raise Violation(
                "ack-durable",
                f"ack #{ack.seq} [{ack.offset},{ack.end}) from "
                f"{ack.node} is on the disk of {holders or 'no node'} only",
            )

    def on_offset_answer(self, queue_id: int, offset: int, node: str, now: float) -> None:
        """QUERY_CONSUMER_OFFSET answered ``offset`` for ``queue_id``: never below an earlier
        answer (the load never resets offsets)."""
        best = self.offsets.get(queue_id)
        if best is not None and offset < best[0]:
            raise Violation(
                "offset-regressed",
                f"{node} answered committed offset {offset} for queue {queue_id} at "
                f"t={now - 1000:.3f}; {best[1]} answered {best[0]} at t={best[2] - 1000:.3f}",
            )
        if best is None or offset > best[0]:
            self.offsets[queue_id] = (offset, node, now)

    def observe_controller(self, epoch: int) -> None:
        """The controller's master epoch never goes down (a node's own last epoch may: a
        rejoin cuts the epochs of a tail the new master does not share)."""
        last = self.epochs.get("controller", 0)
        if epoch < last:
            raise Violation("epoch-monotonic", f"the controller went from epoch {last} to {epoch}")
        self.epochs["controller"] = epoch

    def observe(self, name: str, is_master: bool, epoch: int) -> None:
        if self.node_epochs_monotonic:  # the operator's promotions: a node's epoch only grows
            last = self.epochs.get(name, 0)
            if epoch < last:
                raise Violation("epoch-monotonic", f"{name} went from epoch {last} to {epoch}")
            self.epochs[name] = epoch
        if is_master:
            self.master_under(name, epoch)

    def master_under(self, name: str, epoch: int) -> None:
        """``name`` wrote as master under ``epoch`` (``haproof chaos`` also learns it from
        acknowledgements)."""
        holder = self.masters.setdefault(epoch, name)
        if holder != name:
            raise Violation(
                "one-master-per-epoch", f"{holder} and {name} both master under epoch {epoch}"
            )

    def on_write(self, sim, epoch: int, now: float, ctl) -> None:
        """A write accepted by ``sim`` under ``epoch`` at ``now``: the controller must not have
        elected another node under a newer epoch before (the master lease fences the old one
        first)."""
        for at, new_epoch, bid in ctl.elections:
            if at <= now and new_epoch > epoch and ctl.address_of(bid) != sim.addr:
                raise Violation(
                    "two-writers",
                    f"{sim.name} accepted a write under epoch {epoch} "
                    f"at t={now - 1000:.3f}, after the controller elected id {bid} "
                    f"under epoch {new_epoch} at t={at - 1000:.3f}",
                )

    def acked_held(self, store, start: int, end: int) -> list[Ack]:
        """The acknowledged messages whose bytes ``store`` holds in ``[start, end)``."""
        return [
            ack
            for ack in self.acks
            if ack.offset < end
            and ack.end > start
            and ack.end <= end
            and zlib.crc32(log_bytes(store, ack.offset, ack.end)) == ack.crc
        ]

    def on_truncated(self, name: str, to_offset: int, held: list[Ack], fail, master) -> None:
        """``held``: the acknowledged messages the cut removes. One the master (``master``, a
        SimNode or None) still holds at its offset is a needless cut (counted: the node fetches
        it again; open finding, docs/simulation.md); one it does not is a violation."""
        for ack in held:
            if master is not None and master.up:
                got = log_bytes(master.node.store, ack.offset, ack.end)
                if zlib.crc32(got) == ack.crc:
                    self.needless_cuts += 1
                    continue
            fail(
                Violation(
                    "truncation-acked",
                    f"{name} cut its log at {to_offset}, removing "
                    f"acknowledged #{ack.seq} [{ack.offset},{ack.end})",
                )
            )
            return

    def log_matching(self, master, slaves) -> None:
        mstore = master.node.store
        entries = master.node.role.epoch_entries
        for s in slaves:
            if not s.up or s.node.role.epoch_entries != entries:
                continue
            end = min(s.node.store.max_phy_offset, mstore.max_phy_offset)
            # an empty slave starts at the master's last file (RocketMQ's transfer from where)
            start = max(s.node.store.min_phy_offset, mstore.min_phy_offset, 0)
            mine = log_bytes(s.node.store, start, end)
            theirs = log_bytes(mstore, start, end)
            if mine != theirs:
                n = min(len(mine), len(theirs))
                at = next((i for i in range(n) if mine[i] != theirs[i]), n)
                raise Violation(
                    "log-matching",
                    f"{s.name}'s log differs from master "
                    f"{master.name}'s at offset {start + at} (read {len(mine)} and "
                    f"{len(theirs)} of {end - start} bytes; both under epochs "
                    f"{[(e.epoch, e.start_offset) for e in entries]})",
                )

    def final(self, master) -> None:
        store = master.node.store
        for ack in self.acks:
            got = log_bytes(store, ack.offset, ack.end)
            if zlib.crc32(got) != ack.crc:
                raise Violation(
                    "ack-lost",
                    f"acknowledged #{ack.seq} [{ack.offset},{ack.end}) "
                    f"(epoch {ack.epoch} on {ack.node}) is not in final master "
                    f"{master.name}'s log",
                )
        lost = [
            o for o, (end, crc) in self.reads.items() if zlib.crc32(log_bytes(store, o, end)) != crc
        ]
        self.reads_lost = len(lost)
        if lost:
            offset = min(lost)
            raise Violation(
                "read-lost",
                f"a consumer read [{offset},{self.reads[offset][0]}), not in final master "
                f"{master.name}'s log ({len(lost)} record(s) read and lost)",
            )
