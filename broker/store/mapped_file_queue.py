"""Mapped files strung into one log addressed by a global offset (RocketMQ MappedFileQueue)."""

from __future__ import annotations

import bisect
import logging
import os

from broker.store.mapped_file import MappedFile, file_name
from contracts.errors import StoreError

log = logging.getLogger(__name__)


class MappedFileQueue:
    """The files of one log in ``directory``, each ``file_size`` bytes. Create with :meth:`load`."""

    def __init__(self, directory: str, file_size: int, files: list[MappedFile]):
        self.directory = directory
        self.file_size = file_size
        self.files = files
        self._starts = [f.file_from_offset for f in files]
        self.flush_count = 0  # flushes that wrote something (msync calls)
        self.removed_empty: str | None = None  # an empty last file load removed

    @classmethod
    def load(cls, directory: str, file_size: int) -> MappedFileQueue:
        """Map every file in ``directory``, each made durable as found (positions set to full;
        recovery sets the tail)."""
        os.makedirs(directory, exist_ok=True)
        names = sorted(n for n in os.listdir(directory) if len(n) == 20 and n.isdigit())
        files: list[MappedFile] = []
        removed: str | None = None
        for i, n in enumerate(names):
            path = os.path.join(directory, n)
            size = os.path.getsize(path)
            if size == 0 and i == len(names) - 1:
                # created, not yet sized, when the process died (open, then ftruncate): no byte
                # was ever written to it
                log.warning("%s: removing an empty file left by a crash as it was created", path)
                os.unlink(path)
                removed = path
                continue
            if size != file_size:
                raise StoreError(
                    f"{path}: size {size} differs from the mapped file size {file_size}; "
                    "check mappedFileSize* in broker.conf"
                )
            if int(n) % file_size:
                raise StoreError(f"{path}: start offset is not a multiple of {file_size}")
            if files and int(n) != files[-1].end_offset:
                raise StoreError(
                    f"{path}: gap in the log, previous file ends at {files[-1].end_offset}"
                )
            mf = MappedFile.open(path, file_size)
            mf.sync_inherited()
            mf.wrote_position = mf.flushed_position = file_size
            files.append(mf)
        queue = cls(directory, file_size, files)
        queue.removed_empty = removed
        return queue

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """Global offset of the write position (end of the last written byte)."""
        if not self.files:
            return 0
        last = self.files[-1]
        return last.file_from_offset + last.wrote_position

    @property
    def flushed_offset(self) -> int:
        for mf in reversed(self.files):
            if mf.flushed_position > 0:
                return mf.file_from_offset + mf.flushed_position
        return self.min_offset

    def last_file(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def last_file_for_append(self, start_offset: int = 0) -> MappedFile:
        """The last file if it has room, else a new one following it (or at ``start_offset``)."""
        last = self.last_file()
        if last is not None and not last.is_full:
            return last
        if last is None:
            start = start_offset - (start_offset % self.file_size)
        else:
            start = last.end_offset
        mf = MappedFile.open(os.path.join(self.directory, file_name(start)), self.file_size)
        self.files.append(mf)
        self._starts.append(start)
        return mf

    def find(self, offset: int) -> MappedFile | None:
        """The file holding global ``offset`` (None when outside the log)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        mf = self.files[i]
        return mf if offset < mf.end_offset else None

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` written bytes at ``offset``, never across a file end."""
        mf = self.find(offset)
        if mf is None:
            return b""
        return mf.read(offset - mf.file_from_offset, size)

    def flush(self, least_pages: int = 0) -> int:
        """Flush every file with unflushed bytes; returns the flushed global offset."""
        for mf in self.files:
            if mf.flushed_position < mf.wrote_position:
                before = mf.flushed_position
                if mf.flush(least_pages if mf is self.files[-1] else 0) > before:
                    self.flush_count += 1
        return self.flushed_offset

    def truncate_dirty(self, offset: int) -> None:
        """Drop every byte at or above ``offset`` (whole files above it are deleted)."""
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.file_from_offset >= offset:
                log.info("deleting %s (at or above truncation point %d)", mf.path, offset)
                mf.destroy()
                continue
            if offset < mf.end_offset:
                mf.truncate_to(offset - mf.file_from_offset)
            keep.append(mf)
        self.files = keep
        self._starts = [f.file_from_offset for f in keep]

    def delete_all(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files = []
        self._starts = []

    def close(self) -> None:
        for mf in self.files:
            mf.close()
