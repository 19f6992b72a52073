"""The commit log: append, read and recovery over a mapped file queue (RocketMQ CommitLog).

Not thread-safe for writers on its own: the store façade serialises appends under its put lock
(RocketMQ's putMessageLock). Readers may run concurrently with one writer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.recovery import (
    Damage,
    StoreDamagedError,
    find_resume,
    found_end,
    quarantine,
    walk_valid_log,
)
from contracts.errors import CorruptRecordError, StoreError
from contracts.record.builder import EncodedMessage, encode_blank
from contracts.record.layout import END_FILE_MIN_BLANK_LENGTH
from contracts.record.model import Record
from contracts.record.reader import decode_record, scan_records
from contracts.record_walk import walk_valid

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Appended:
    wrote_offset: int
    wrote_bytes: int
    store_timestamp: int


@dataclass(slots=True)
class RecoveryReport:
    """What recovery found: ``found_end`` = end of non-zero data, ``valid_end`` = kept log end;
    ``damage`` when valid records followed the point where the walk stopped (then
    ``quarantined`` names the side file that kept the bytes this node dropped to refetch)."""

    abnormal: bool
    scanned_from: int
    valid_end: int
    found_end: int
    reason: str = ""
    damage: Damage | None = None
    quarantined: str | None = None

    @property
    def dropped_bytes(self) -> int:
        return max(0, self.found_end - self.valid_end)


class CommitLog:
    def __init__(self, queue: MappedFileQueue, store_host: tuple[str, int]):
        self.queue = queue
        self.store_host = store_host

    @classmethod
    def load(cls, directory: str, file_size: int, store_host: tuple[str, int]) -> CommitLog:
        return cls(MappedFileQueue.load(directory, file_size), store_host)

    @property
    def file_size(self) -> int:
        return self.queue.file_size

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_offset

    # -- writing -------------------------------------------------------------------------------

    def append(self, enc: EncodedMessage, queue_offset: int, store_timestamp: int) -> Appended:
        """Append one encoded message, closing the current file with a BLANK when it won't fit."""
        offset = self.append_encoded(enc, queue_offset, store_timestamp)
        return Appended(offset, len(enc.data), store_timestamp)

    def append_encoded(self, enc: EncodedMessage, queue_offset: int, store_timestamp: int) -> int:
        """:meth:`append` returning only the record's offset (the store's hot path)."""
        data = enc.data
        size = len(data)
        files = self.queue.files
        if files:
            mf = files[-1]
            pos = mf.wrote_position
            # fast path: the last file has room for the record and a closing BLANK after it
            if pos + size + END_FILE_MIN_BLANK_LENGTH <= mf.file_size:
                offset = mf.file_from_offset + pos
                mf.append(enc.stamp(queue_offset, offset, store_timestamp))
                return offset
        if size + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise StoreError(f"record of {size} bytes cannot fit a {self.file_size}-byte file")
        mf = self.queue.last_file_for_append()
        if size + END_FILE_MIN_BLANK_LENGTH > mf.remaining:
            self._close_with_blank(mf)
            mf = self.queue.last_file_for_append()
        offset = mf.file_from_offset + mf.wrote_position
        mf.append(enc.stamp(queue_offset, offset, store_timestamp))
        return offset

    @staticmethod
    def _close_with_blank(mf: MappedFile) -> None:
        remaining = mf.remaining
        mf.write_at(mf.wrote_position, encode_blank(remaining))
        mf.wrote_position = mf.file_size

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Append replicated bytes that must start exactly at the log end (slave side).

        ``data`` never crosses a file end (the HA protocol guarantees it; checked here).
        Returns the new max offset.
        """
        if offset != self.max_offset:
            # An empty slave log starts where the master sends from: a file start.
            if self.queue.files or offset % self.file_size:
                raise StoreError(f"raw append at {offset}, but the log ends at {self.max_offset}")
        pos = 0
        while pos < len(data):
            mf = self.queue.last_file_for_append(offset)
            if mf.file_from_offset + mf.wrote_position != offset + pos:
                raise StoreError(f"raw append at {offset + pos} does not continue the log")
            n = min(len(data) - pos, mf.remaining)
            mf.append(data[pos : pos + n])
            pos += n
        return self.max_offset

    def flush(self, least_pages: int = 0) -> int:
        return self.queue.flush(least_pages)

    def truncate_dirty(self, offset: int) -> None:
        self.queue.truncate_dirty(offset)

    # -- reading -------------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``, never across a file end."""
        return self.queue.read(offset, size)

    def read_record(self, offset: int, size: int | None = None) -> bytes:
        """The raw bytes of the record at ``offset`` (size read from the record if not given)."""
        if size is None:
            head = self.read(offset, 4)
            if len(head) < 4:
                raise StoreError(f"no record at commit log offset {offset}")
            size = int.from_bytes(head, "big", signed=True)
        data = self.read(offset, size)
        if len(data) != size:
            raise StoreError(f"record at {offset} ({size} bytes) runs past the written log")
        return data

    def lookup(self, offset: int) -> Record:
        mf = self.queue.find(offset)
        if mf is None:
            raise StoreError(f"commit log offset {offset} is outside the log")
        return decode_record(
            mf.buffer,
            offset - mf.file_from_offset,
            base_offset=mf.file_from_offset,
            limit=mf.wrote_position,
            source=mf.path,
        )

    def iter_records(self, start: int, end: int | None = None) -> Iterator[Record]:
        """Records (BLANKs included) from ``start`` up to ``end`` (default the log end)."""
        stop = self.max_offset if end is None else end
        offset = start
        while offset < stop:
            mf = self.queue.find(offset)
            if mf is None:
                return
            limit = min(mf.wrote_position, stop - mf.file_from_offset)
            for rec in scan_records(
                mf.buffer,
                base_offset=mf.file_from_offset,
                start=offset - mf.file_from_offset,
                limit=limit,
                source=mf.path,
            ):
                yield rec
                offset = rec.end
            if offset < mf.end_offset and offset < stop:
                return  # stopped inside a file: the written data ends here
            offset = max(offset, mf.end_offset)

    # -- recovery ------------------------------------------------------------------------------

    def recover(
        self,
        abnormal: bool,
        safe_timestamp_ms: int = 0,
        on_record: Callable[[Record], None] | None = None,
        *,
        check_crc: bool = True,
        refetch_damage: bool = False,
        root: str = ".",
    ) -> RecoveryReport:
        """Find the log end, drop a torn tail and position the writer.

        Normal recovery (clean shutdown) scans the last three files; abnormal recovery (crash)
        starts from the newest file whose first record was stored before ``safe_timestamp_ms``
        (the checkpoint). Both check magic, chaining and (``check_crc``, RocketMQ's
        checkCRCOnRecover) the body CRC of every record. ``on_record`` sees every valid record
        scanned (used to rebuild consume queues).

        Valid records after the stop mean damage, not a torn tail (broker/store/recovery.py):
        StoreDamagedError, nothing moved; or with ``refetch_damage`` (a slave) the bytes from
        the damage on go to a quarantine side file under ``root`` and the log ends at the
        damage, for replication to fetch them again.
        """
        files = self.queue.files
        if not files:
            return RecoveryReport(abnormal, 0, 0, 0)
        start_idx = max(0, len(files) - 3)
        if abnormal:
            start_idx = 0
            for i in range(len(files) - 1, -1, -1):
                ts = self._first_store_timestamp(files[i])
                if ts is not None and ts <= safe_timestamp_ms:
                    start_idx = i
                    break
        scanned_from = files[start_idx].file_from_offset
        valid_end = scanned_from
        reason = ""
        for idx in range(start_idx, len(files)):
            mf = files[idx]
            pos, reason, closed = walk_valid(  # the file's valid records, contracts' walk
                mf.buffer,
                0,
                base_offset=mf.file_from_offset,
                limit=mf.file_size,
                check_crc=check_crc,
                on_record=on_record,
                source=mf.path,
            )
            valid_end = mf.file_from_offset + pos
            if not closed:
                break
        found = self._found_end(valid_end)
        damage = None
        quarantined = None
        resume = find_resume(self.queue, valid_end, found) if found > valid_end else None
        if resume is not None:
            found = max(found, walk_valid_log(self.queue, resume)[0])  # trailing zero bytes
            mf = self.queue.find(valid_end) or files[-1]
            damage = Damage(mf.path, mf.file_from_offset, valid_end, resume, found, reason)
            if not refetch_damage:
                raise StoreDamagedError(damage, root)
            log.error(
                "%s; this slave refetches [%d, %d) from its master",
                damage.describe(),
                valid_end,
                found,
            )
            quarantined = quarantine(
                root, self.queue, valid_end, found, damage.describe(), "refetch"
            )
        elif found > valid_end:
            log.warning(
                "commit log recovery: dropping %d bytes [%d, %d): %s",
                found - valid_end,
                valid_end,
                found,
                reason or "torn tail",
            )
        self._position_files(valid_end)
        return RecoveryReport(abnormal, scanned_from, valid_end, found, reason, damage, quarantined)

    @staticmethod
    def _first_store_timestamp(mf: MappedFile) -> int | None:
        try:
            rec = decode_record(mf.buffer, 0, limit=mf.file_size, with_body=False)
        except CorruptRecordError:
            return None
        return None if rec.is_blank else rec.store_timestamp

    def _position_files(self, valid_end: int) -> None:
        """Every file full before ``valid_end``, partial at it, deleted after it."""
        self.queue.truncate_dirty(valid_end)
        for mf in self.queue.files:
            if mf.end_offset <= valid_end:
                mf.wrote_position = mf.flushed_position = mf.file_size
            else:
                mf.wrote_position = mf.flushed_position = valid_end - mf.file_from_offset

    def _found_end(self, valid_end: int) -> int:
        return found_end(self.queue, valid_end)
