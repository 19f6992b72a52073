"""Consume queues: a derived, rebuildable index of one (topic, queueId) over the commit log.

Entry layout (RocketMQ ConsumeQueue, CQ_STORE_UNIT_SIZE = 20), big-endian::

    commit log offset  i64   physical offset of the record
    size               i32   record size
    tag hash code      i64   Java String.hashCode of the TAGS property (0 without tags)

Files live in ``consumequeue/{topic}/{queueId}/`` named by the 20-digit byte offset of their first
entry; queue offset N is at byte N * 20.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator

from broker.store.mapped_file_queue import MappedFileQueue
from contracts.errors import StoreError

log = logging.getLogger(__name__)

ENTRY = struct.Struct(
    ">q"  # commit log offset
    "i"  # record size
    "q"  # tag hash code
)
ENTRY_SIZE = ENTRY.size  # 20
DEFAULT_FILE_SIZE = 300_000 * ENTRY_SIZE


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, queue: MappedFileQueue):
        self.topic = topic
        self.queue_id = queue_id
        self.files = queue
        self.max_phy_offset = 0  # end of the last indexed record in the commit log
        self.min_logic_offset = 0  # first valid byte (after commit log cleanup)
        self.damage: str | None = None  # what loading found wrong (store/queue_check.py)

    @classmethod
    def load(cls, root: str, topic: str, queue_id: int, file_size: int) -> ConsumeQueue:
        if file_size % ENTRY_SIZE:
            raise StoreError(f"consume queue file size {file_size} is not a multiple of 20")
        directory = os.path.join(root, topic, str(queue_id))
        files = MappedFileQueue.load(directory, file_size)
        cq = cls(topic, queue_id, files)
        if files.removed_empty:
            cq.damage = f"{files.removed_empty}: empty file"
        cq._recover()
        return cq

    def _recover(self) -> None:
        """Position the writer after the last non-empty entry; drop empty files past it."""
        files = self.files.files
        end = self.files.min_offset
        for mf in reversed(files):
            pos = self._last_entry_end(mf)
            if pos > 0:
                end = mf.file_from_offset + pos
                offset, size, _ = ENTRY.unpack_from(mf.buffer, pos - ENTRY_SIZE)
                self.max_phy_offset = offset + size
                rest = mf.buffer[pos : mf.file_size]
                if rest.count(0) != len(rest):
                    self.damage = f"{mf.path}: data after the all-zero entry {end // ENTRY_SIZE}"
                break
        if files and end < self.files.max_offset:
            self.files.truncate_dirty(end)
        for mf in self.files.files:
            rel = end - mf.file_from_offset
            mf.wrote_position = mf.flushed_position = max(0, min(mf.file_size, rel))
        self.min_logic_offset = self.files.min_offset

    @staticmethod
    def _last_entry_end(mf) -> int:
        buf = mf.buffer
        # binary search for the first all-zero entry (entries are written contiguously)
        lo, hi = 0, mf.file_size // ENTRY_SIZE
        while lo < hi:
            mid = (lo + hi) // 2
            _, size, _ = ENTRY.unpack_from(buf, mid * ENTRY_SIZE)
            if size > 0:
                lo = mid + 1
            else:
                hi = mid
        return lo * ENTRY_SIZE

    # -- offsets -------------------------------------------------------------------------------

    @property
    def max_offset_in_queue(self) -> int:
        """The next queue offset to be written (RocketMQ getMaxOffsetInQueue)."""
        return self.files.max_offset // ENTRY_SIZE

    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // ENTRY_SIZE

    # -- writing -------------------------------------------------------------------------------

    def reserve(self, queue_offset: int) -> None:
        """Make sure the file for entry ``queue_offset`` exists (DiskFullError when it cannot
        be made), so that a record appended to the commit log can always be indexed."""
        files = self.files.files
        if files:
            if not files[-1].is_full:
                return
        elif queue_offset > 0:
            return  # a queue starting above 0: put() places its first file
        self.files.last_file_for_append()

    def put(self, queue_offset: int, phy_offset: int, size: int, tags_code: int) -> None:
        """Write the entry for ``queue_offset``; entries must come in order."""
        files = self.files.files
        if files:  # fast path: the next entry of a file with room
            mf = files[-1]
            pos = mf.wrote_position
            if (
                pos + ENTRY_SIZE <= mf.file_size
                and (mf.file_from_offset + pos) // ENTRY_SIZE == queue_offset
            ):
                mf.append(ENTRY.pack(phy_offset, size, tags_code))
                self.max_phy_offset = phy_offset + size
                return
        expected = self.max_offset_in_queue
        if queue_offset < expected:
            return  # already indexed (re-dispatch after recovery)
        if queue_offset > expected:
            if expected == 0 and not self.files.files:
                # a queue starting above 0 (e.g. after the commit log's head was deleted)
                self.files.last_file_for_append(queue_offset * ENTRY_SIZE)
                self.min_logic_offset = queue_offset * ENTRY_SIZE
                mf = self.files.last_file()
                mf.wrote_position = queue_offset * ENTRY_SIZE - mf.file_from_offset
            else:
                raise StoreError(
                    f"consume queue {self.topic}/{self.queue_id}: queue offset {queue_offset} "
                    f"leaves a gap after {expected - 1}"
                )
        mf = self.files.last_file_for_append()
        mf.append(ENTRY.pack(phy_offset, size, tags_code))
        self.max_phy_offset = phy_offset + size

    def flush(self) -> None:
        self.files.flush()

    def truncate_dirty(self, phy_offset: int) -> None:
        """Drop entries pointing at or above commit log offset ``phy_offset``."""
        lo, hi = self.min_offset_in_queue, self.max_offset_in_queue
        while lo < hi:  # first entry whose record starts at or above phy_offset
            mid = (lo + hi) // 2
            entry = self.get(mid)
            if entry is not None and entry[0] < phy_offset:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.max_offset_in_queue:
            log.info(
                "consume queue %s/%d: truncating queue offsets [%d, %d)",
                self.topic,
                self.queue_id,
                lo,
                self.max_offset_in_queue,
            )
            self.files.truncate_dirty(lo * ENTRY_SIZE)
        last = self.get(lo - 1) if lo > 0 else None
        self.max_phy_offset = last[0] + last[1] if last else 0

    # -- reading -------------------------------------------------------------------------------

    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(commit log offset, size, tag code) of ``queue_offset``, None outside the queue."""
        if not self.min_offset_in_queue <= queue_offset < self.max_offset_in_queue:
            return None
        byte = queue_offset * ENTRY_SIZE
        mf = self.files.find(byte)
        if mf is None:
            return None
        return ENTRY.unpack_from(mf.buffer, byte - mf.file_from_offset)

    def iter_from(self, queue_offset: int, limit: int) -> Iterator[tuple[int, int, int, int]]:
        """(queue offset, commit log offset, size, tag code) for up to ``limit`` entries."""
        end = min(self.max_offset_in_queue, queue_offset + limit)
        for qo in range(max(queue_offset, self.min_offset_in_queue), end):
            entry = self.get(qo)
            if entry is None:
                return
            yield (qo, *entry)

    def close(self) -> None:
        self.files.close()

    def destroy(self) -> None:
        self.files.delete_all()
