"""The invariants the simulation checks, after every step, periodically, and at the end.

- ``ack-durable``: when a SYNC_MASTER answers SEND_OK (SYNC_FLUSH everywhere), the message's
  bytes are flushed on the master and on at least one other node.
- ``ack-lost``: every acknowledged message is in the final master's log, byte for byte, at the
  offset it was acknowledged at (across every failover).
- ``one-master-per-epoch``: no two nodes are ever master under the same epoch.
- ``epoch-monotonic``: a node's epoch never goes down (restarts included).
- ``log-matching``: a replica that shares the master's epochs holds the master's bytes.
- ``truncation-acked``: a truncation never removes an acknowledged byte.
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
        self.masters: dict[int, str] = {}  # epoch -> the node that was master under it
        self.epochs: dict[str, int] = {}  # node -> highest epoch seen

    def on_ack(self, ack: Ack, nodes, disk) -> None:
        """At the moment of the answer: the message is on two disks (SYNC_MASTER over
        SYNC_FLUSH), byte for byte, by the disk model."""
        self.acks.append(ack)
        holders = [
            s.name for s in nodes if zlib.crc32(s.durable(disk, ack.offset, ack.end)) == ack.crc
        ]
        if len(holders) < 2:
            raise Violation("ack-durable", f"ack #{ack.seq} [{ack.offset},{ack.end}) from "
                            f"{ack.node} is on the disk of {holders or 'no node'} only")  # fmt: skip

    def observe(self, name: str, is_master: bool, epoch: int) -> None:
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
            raise Violation("one-master-per-epoch", f"{holder} and {name} both master "
                            f"under epoch {epoch}")  # fmt: skip

    def acked_held(self, store, start: int, end: int) -> list[Ack]:
        """The acknowledged messages whose bytes ``store`` holds in ``[start, end)``."""
        return [
            ack
            for ack in self.acks
            if ack.offset < end and ack.end > start and ack.end <= end
            and zlib.crc32(log_bytes(store, ack.offset, ack.end)) == ack.crc
        ]  # fmt: skip

    def on_truncated(self, name: str, to_offset: int, held: list[Ack], fail) -> None:
        for ack in held:
            fail(Violation("truncation-acked", f"{name} cut its log at {to_offset}, removing "
                           f"acknowledged #{ack.seq} [{ack.offset},{ack.end})"))  # fmt: skip
            return

    def log_matching(self, master, slaves) -> None:
        mstore = master.node.store
        entries = master.node.role.epoch_entries
        for s in slaves:
            if not s.up or s.node.role.epoch_entries != entries:
                continue
            end = min(s.node.store.max_phy_offset, mstore.max_phy_offset)
            mine = log_bytes(s.node.store, 0, end)
            theirs = log_bytes(mstore, 0, end)
            if mine != theirs:
                at = next(i for i in range(min(len(mine), len(theirs))) if mine[i] != theirs[i])
                raise Violation("log-matching", f"{s.name}'s log differs from master "
                                f"{master.name}'s at offset {at} (both under epochs {entries})")  # fmt: skip

    def final(self, master) -> None:
        store = master.node.store
        for ack in self.acks:
            got = log_bytes(store, ack.offset, ack.end)
            if zlib.crc32(got) != ack.crc:
                raise Violation("ack-lost", f"acknowledged #{ack.seq} [{ack.offset},{ack.end}) "
                                f"(epoch {ack.epoch} on {ack.node}) is not in final master "
                                f"{master.name}'s log")  # fmt: skip
