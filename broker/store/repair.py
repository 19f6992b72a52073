"""``haproof store repair STORE_DIR``: find every damaged range of an (offline) commit log and
quarantine it, keeping every valid record (broker/store/recovery.py says how ranges are found).

The whole log is walked with CRC checks, not only the files recovery scans. Each damaged range
``[start, resume)`` is copied to ``quarantine/{start}-{resume}.bin`` (with a ``.json``
description) and then filled so the log chains again; a torn tail (nothing valid after it) is
left for the broker's recovery to drop. ``--dry-run`` only reports. The store's lock is held
throughout, so a running broker and a repair never meet.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass

from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.recovery import (
    Damage,
    fill,
    find_resume,
    found_end,
    quarantine,
    walk_valid_log,
)
from contracts.errors import CorruptRecordError, StoreError
from contracts.record.reader import decode_record


@dataclass(slots=True)
class RepairReport:
    damages: list[Damage]
    quarantined: list[str]
    torn_tail: tuple[int, int] | None  # [from, to): left for recovery to drop
    log_end: int


def find_damage(queue: MappedFileQueue) -> Iterator[Damage | tuple[int, int]]:
    """Each damaged range in log order, then the torn tail ``(from, to)`` if there is one."""
    offset = queue.min_offset
    while True:
        stop, reason = walk_valid_log(queue, offset)
        end = found_end(queue, stop)
        if end <= stop:
            return
        resume = find_resume(queue, stop, end)
        if resume is None:
            yield (stop, end)
            return
        mf = queue.find(stop) or queue.files[-1]
        yield Damage(mf.path, mf.file_from_offset, stop, resume, end, reason)
        offset = resume


def commit_log_dir(store_dir: str) -> str:
    path = os.path.join(store_dir, "commitlog")
    if not os.path.isdir(path):
        raise StoreError(f"{store_dir}: no commitlog/ directory (give the store root)")
    return path


def _file_size(directory: str) -> int:
    for name in sorted(os.listdir(directory)):
        if len(name) == 20 and name.isdigit():
            size = os.path.getsize(os.path.join(directory, name))
            if size:
                return size
    raise StoreError(f"{directory}: no commit log files (20-digit names)")


def repair(
    store_dir: str, store_host: tuple[str, int] = ("127.0.0.1", 0), dry_run: bool = False
) -> RepairReport:
    directory = commit_log_dir(store_dir)
    lock_path = os.path.join(store_dir, "lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open {lock_path}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise StoreError(
                f"{store_dir} is in use (a broker holds its lock): stop it first"
            ) from exc
        queue = MappedFileQueue.load(directory, _file_size(directory))
        try:
            return _repair(store_dir, queue, store_host, dry_run)
        finally:
            queue.close()
    finally:
        os.close(fd)


def _first_store_host(queue: MappedFileQueue, default: tuple[str, int]) -> tuple[str, int]:
    """The STOREHOST the log's records carry (fillers carry the same)."""
    if not queue.files:
        return default
    mf = queue.files[0]
    try:
        rec = decode_record(mf.buffer, 0, limit=mf.file_size, with_body=False)
    except CorruptRecordError:
        return default
    return default if rec.is_blank else rec.store_host


def _repair(store_dir, queue: MappedFileQueue, store_host, dry_run: bool) -> RepairReport:
    store_host = _first_store_host(queue, store_host)
    damages: list[Damage] = []
    torn = None
    for found in find_damage(queue):
        if isinstance(found, Damage):
            damages.append(found)
        else:
            torn = found
    quarantined = []
    if not dry_run:
        for d in damages:
            path = quarantine(store_dir, queue, d.start, d.resume, d.describe(), "repair")
            fill(queue, d.start, d.resume, store_host, os.path.basename(path))
            quarantined.append(path)
    end = torn[0] if torn is not None else found_end(queue, queue.min_offset)
    return RepairReport(damages, quarantined, torn, end)
