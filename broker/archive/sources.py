"""Where the shipper reads commit log bytes from: the :class:`CommitLogSource` protocol and a
store directory on disk (ours or a real RocketMQ broker's); a live node's store is the other
source (``broker/archive/node_archiver.py``)."""

from __future__ import annotations

import mmap
import os
from typing import Protocol

from contracts.errors import StoreError
from contracts.record_walk import record_scanner, walk_in_place


class CommitLogSource(Protocol):
    mapped_file_size: int
    # True when the source's own writer framed every record below shippable_end() (a live
    # node's store): the shipper then chains records by TOTALSIZE and MAGIC only and leaves the
    # CRC and field checks to the audit; a store directory (ours or a real RocketMQ broker's)
    # gets the full walk.
    framing_trusted: bool

    def min_offset(self) -> int: ...
    def shippable_end(self) -> int: ...  # bytes below this are flushed and may be shipped
    def file_view(self, file_start: int) -> memoryview | bytes: ...  # a whole file's bytes


class StoreDirSource:
    """The commit log files of a store directory (``commitlog/`` or the directory itself)."""

    framing_trusted = False

    def __init__(self, directory: str, mapped_file_size: int, files: list[tuple[int, str]]):
        self.directory = directory
        self.mapped_file_size = mapped_file_size
        self.files = files  # (start offset, path), sorted
        self._maps: dict[int, mmap.mmap] = {}
        self.cap: int | None = None  # --follow: ship nothing at or past this offset yet

    @classmethod
    def open(cls, store_dir: str, mapped_file_size: int | None = None) -> StoreDirSource:
        cl = os.path.join(store_dir, "commitlog")
        directory = cl if os.path.isdir(cl) else store_dir
        if not os.path.isdir(directory):
            raise StoreError(f"{store_dir}: no such store directory")
        names = sorted(n for n in os.listdir(directory) if len(n) == 20 and n.isdigit())
        if not names:
            raise StoreError(f"{directory}: no commit log files (20-digit names)")
        sizes = {os.path.getsize(os.path.join(directory, n)) for n in names} - {0}
        if mapped_file_size is None:
            if len(sizes) != 1:
                raise StoreError(
                    f"{directory}: commit log files have sizes {sorted(sizes)}; "
                    "give the mapped file size explicitly"
                )
            mapped_file_size = sizes.pop()
        files = [(int(n), os.path.join(directory, n)) for n in names]
        for start, path in files:
            if start % mapped_file_size:
                raise StoreError(f"{path}: start offset is not a multiple of {mapped_file_size}")
        return cls(directory, mapped_file_size, files)

    def min_offset(self) -> int:
        return self.files[0][0]

    def shippable_end(self) -> int:
        """A stopped store: everything written (the cutter stops at the end of the records);
        a followed store: up to ``cap``."""
        start, path = self.files[-1]
        end = start + os.path.getsize(path)
        return end if self.cap is None else min(end, self.cap)

    def written_end(self, start: int) -> int:
        """End of the last record written at or after ``start`` (a record boundary).

        A live writer may be in the middle of copying a record: a torn header ends the scan
        here, and ``--follow`` ships a range only one round after it saw it written, so a record
        being copied is complete by the time its bytes are read for shipping.
        """
        end = offset = start
        files = {s for s, _ in self.files}
        size = self.mapped_file_size
        scan = record_scanner()
        while True:
            file_start = offset - offset % size
            if file_start not in files:
                return end
            view = self.file_view(file_start)
            end, _n, _last, why = walk_in_place(
                view,
                offset - file_start,
                base_offset=file_start,
                limit=len(view),
                decode=scan,
                source=self.directory,
            )
            end = offset = file_start + end
            if why != "blank":
                return end

    def file_view(self, file_start: int) -> memoryview | bytes:
        for start, path in self.files:
            if start == file_start:
                if start not in self._maps:
                    if os.path.getsize(path) == 0:
                        return b""
                    with open(path, "rb") as fh:
                        self._maps[start] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                return memoryview(self._maps[start])
        return b""

    def refresh(self) -> None:
        """Pick up files created since open (``--follow``)."""
        known = {s for s, _ in self.files}
        for n in sorted(os.listdir(self.directory)):
            if len(n) == 20 and n.isdigit() and int(n) not in known:
                self.files.append((int(n), os.path.join(self.directory, n)))
        self.files.sort()
        # a growing last file: re-map it next time
        last = self.files[-1][0]
        _unmap(self._maps.pop(last, None))

    def close(self) -> None:
        for m in self._maps.values():
            _unmap(m)
        self._maps.clear()


def _unmap(m: mmap.mmap | None) -> None:
    """Close a map now, or, while a view of it (a record a scan still holds) lives, drop it:
    it is unmapped when the last view goes."""
    if m is None:
        return
    try:
        m.close()
    except BufferError:
        pass
