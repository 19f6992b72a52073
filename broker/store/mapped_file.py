"""One fixed-size memory-mapped file named by its 20-digit start offset (RocketMQ MappedFile).

State: ``wrote_position`` (bytes appended) and ``flushed_position`` (bytes known to be on disk).
Appends are memory copies into the mapping; ``flush`` msyncs the dirty pages.

A new file's blocks are reserved (``posix_fallocate``) before it is mapped: a write into a
sparse mapping on a full disk is a SIGBUS that kills the process without a word, a reservation
that fails is a :class:`DiskFullError` before anything was written (the half-made file is
removed). A file system without fallocate gets a sparse file and one warning.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
from collections.abc import Callable

from broker.planted_bugs import active as planted_bug_active
from contracts.errors import DiskFullError, StoreError

log = logging.getLogger(__name__)

# Told (path, start, end) each time bytes [start, end) of a file are made durable (fdatasync,
# msync). None outside the simulation, whose disk model (tools/sim/disk.py) sets it.
durability_observer: Callable[[str, int, int], None] | None = None

PAGE_SIZE = mmap.PAGESIZE
OS_PAGE_SIZE = 4096  # RocketMQ counts dirty pages in 4 KiB units
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NO_FALLOCATE = (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
_warned_sparse: set[str] = set()


def reserve(fd: int, path: str, size: int) -> None:
    """Allocate ``size`` bytes for the file behind ``fd`` (DiskFullError when there is no room)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise DiskFullError(
                f"no space for {path}: cannot reserve {size} bytes ({exc.strerror})"
            ) from exc
        if exc.errno not in _NO_FALLOCATE:
            raise
        directory = os.path.dirname(path)
        if directory not in _warned_sparse:
            _warned_sparse.add(directory)
            log.warning(
                "%s: the file system cannot reserve space (%s): files are sparse, and "
                "a full disk may stop the process",
                directory,
                exc.strerror,
            )
        os.ftruncate(fd, size)


def file_name(offset: int) -> str:
    return f"{offset:020d}"


class MappedFile:
    """A file of ``file_size`` bytes mapped read/write. Create through :meth:`open`."""

    def __init__(self, path: str, file_from_offset: int, file_size: int, fd: int, mm: mmap.mmap):
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self._fd = fd
        self._mm = mm
        self.wrote_position = 0
        self.flushed_position = 0
        self._flush_lock = threading.Lock()
        self.closed = False

    @classmethod
    def open(cls, path: str, file_size: int) -> MappedFile:
        """Open (creating and sizing if needed) the mapped file at ``path``."""
        name = os.path.basename(path)
        if len(name) != 20 or not name.isdigit():
            raise StoreError(f"{path}: a mapped file is named by a 20-digit offset")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise DiskFullError(f"no space to create {path} ({exc.strerror})") from exc
            raise StoreError(f"cannot open {path}: {exc.strerror}") from exc
        created = False
        try:
            actual = os.fstat(fd).st_size
            if actual not in (0, file_size):
                raise StoreError(
                    f"{path}: size {actual} differs from the configured mapped file size "
                    f"{file_size} (mappedFileSize* in broker.conf)"
                )
            if actual == 0:
                created = True
                reserve(fd, path, file_size)
            mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as exc:
            _abandon(fd, path, created)
            raise StoreError(f"cannot map {path}: {exc.strerror}") from exc
        except StoreError:
            _abandon(fd, path, created)
            raise
        return cls(path, int(name), file_size, fd, mm)

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def buffer(self) -> mmap.mmap:
        return self._mm

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Copy ``data`` at the write position; returns the relative position it went to."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise StoreError(f"{self.path}: append of {len(data)} bytes past the file end")
        self._mm[pos:end] = data
        self.wrote_position = end
        return pos

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        self._mm[pos : pos + len(data)] = data

    def read(self, pos: int, size: int) -> bytes:
        """Bytes ``[pos, pos + size)`` relative to the file start, limited to what was written."""
        end = min(pos + size, self.wrote_position)
        return self._mm[pos:end] if end > pos else b""

    def dirty_pages(self) -> int:
        return (self.wrote_position // OS_PAGE_SIZE) - (self.flushed_position // OS_PAGE_SIZE)

    def flush(self, least_pages: int = 0) -> int:
        """msync what was written since the last flush if at least ``least_pages`` are dirty.

        Returns the flushed position. Thread-safe; a concurrent append is fine (its bytes are
        flushed by the next call).
        """
        with self._flush_lock:
            target = self.wrote_position
            if target <= self.flushed_position or self.closed:
                return self.flushed_position
            if least_pages > 0 and self.dirty_pages() < least_pages and target < self.file_size:
                return self.flushed_position
            # fdatasync writes back the pages dirtied through the shared mapping too (Linux),
            # and unlike mmap.flush it releases the GIL, so appends go on during the fsync.
            os.fdatasync(self._fd)
            self.flushed_position = target
            if durability_observer is not None:
                durability_observer(self.path, 0, self.file_size)
            return target

    def sync_inherited(self) -> None:
        """fdatasync the whole file as found at load: a previous process killed before its
        flush leaves dirty pages in the page cache that recovery would otherwise count as on
        disk, and a power loss after the restart would take them from the middle of the log."""
        with self._flush_lock:
            os.fdatasync(self._fd)
            if durability_observer is not None:
                durability_observer(self.path, 0, self.file_size)

    def truncate_to(self, pos: int) -> None:
        """Zero everything from ``pos`` on and move both positions back to ``pos``."""
        if pos < self.file_size:
            zero_end = max(self.wrote_position, pos)
            # zero in 1 MiB steps so a 1 GiB file does not allocate 1 GiB
            step = 1 << 20
            for p in range(pos, zero_end, step):
                n = min(step, zero_end - p)
                self._mm[p : p + n] = bytes(n)
            if zero_end > pos and not planted_bug_active("nondurable-truncation"):
                start = (pos // PAGE_SIZE) * PAGE_SIZE
                self._mm.flush(start, zero_end - start)
                if durability_observer is not None:
                    durability_observer(self.path, start, zero_end)
        self.wrote_position = pos
        self.flushed_position = min(self.flushed_position, pos)

    def close(self) -> None:
        if self.closed:
            return
        with self._flush_lock:
            self.closed = True
            try:
                self._mm.close()
            finally:
                os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path}, wrote={self.wrote_position}, flushed={self.flushed_position})"
        )


def _abandon(fd: int, path: str, created: bool) -> None:
    """Close a file that could not be opened; remove it when this call made it (it was empty)."""
    os.close(fd)
    if created:
        try:
            os.unlink(path)
        except OSError:
            pass
