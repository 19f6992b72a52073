"""The ``file://`` backend: a key is a path under the root directory.

A delete of a key in a node's folder (``v1/{cluster}/{brokerName}/{node}/...``) removes the
folders it leaves empty, up to (not including) the node's folder, so a prune leaves no empty
bucket folders behind for later listings to read. ``os.rmdir`` refuses a folder that is not
empty, and a put retries when a delete removed its folder between creating it and writing its
temporary file there (once that file exists, the folder is not empty).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections import Counter
from collections.abc import Iterator

from contracts import archive_layout as layout
from contracts.errors import (
    ArchiveConflictError,
    ArchiveError,
    ConditionFailedError,
    ObjectNotFoundError,
    ObjectTooLargeError,
)
from contracts.object_store.interface import ObjectInfo, check_key
from contracts.read_limits import MAX_OBJECT_BYTES


class FileObjectStore:
    """``file://`` backend: a key is a path under the root; writes are temp + fsync + rename."""

    def __init__(self, root: str, path: str):
        self.root = root
        self.path = path
        self.requests: Counter = Counter()

    def _p(self, key: str) -> str:
        return os.path.join(self.path, check_key(key))

    def _write(self, path: str, data: bytes) -> None:
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with _create(tmp) as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise ArchiveError(f"cannot write {path}: {exc.strerror}") from exc

    def put(self, key: str, data: bytes, sha256: str | None = None) -> bool:
        self.requests["put"] += 1
        path = self._p(key)
        if os.path.exists(path):
            if self.get(key) == data:
                return False
            raise ArchiveConflictError(f"{self.root}/{key} already holds different content")
        self._write(path, data)
        return True

    def put_mutable(self, key: str, data: bytes) -> None:
        self.requests["put"] += 1
        self._write(self._p(key), data)

    def create(self, key: str, data: bytes) -> str:
        """Write ``key`` only if absent: the bytes go to a temporary file (fsynced), then a hard
        link gives them the key's name, which fails if the name exists (interface)."""
        self.requests["put"] += 1
        path = self._p(key)
        tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            with _create(tmp) as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, path)
        except FileExistsError as exc:
            raise ConditionFailedError(f"{self.root}/{key} exists") from exc
        except OSError as exc:
            raise ArchiveError(f"cannot create {self.root}/{key}: {exc.strerror}") from exc
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return _token(data)

    def replace(self, key: str, data: bytes, token: str) -> str:
        """Write ``key`` only if it still holds the version ``token`` names: under an exclusive
        ``flock`` of the file, the bytes are compared, then replaced (temp, fsync, rename). A
        writer that waited on the lock of a file renamed away meanwhile opens the new one."""
        self.requests["put"] += 1
        path = self._p(key)
        for _ in range(_CREATE_ATTEMPTS):
            try:
                fh = open(path, "rb")
            except FileNotFoundError as exc:
                raise ConditionFailedError(f"{self.root}/{key} is gone") from exc
            with fh:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
                try:
                    if os.fstat(fh.fileno()).st_ino != os.stat(path).st_ino:
                        continue  # replaced while this writer waited: read the new one
                except FileNotFoundError as exc:
                    raise ConditionFailedError(f"{self.root}/{key} is gone") from exc
                if _token(fh.read()) != token:
                    raise ConditionFailedError(f"{self.root}/{key} changed since it was read")
                self._write(path, data)
                return _token(data)
        raise ArchiveError(f"{self.root}/{key}: replaced {_CREATE_ATTEMPTS} times while waiting")

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        data = self.get(key)
        return data, _token(data)

    def get(self, key: str, max_bytes: int | None = None) -> bytes:
        """The object's bytes: a regular file only, at most ``max_bytes``."""
        self.requests["get"] += 1
        limit = MAX_OBJECT_BYTES if max_bytes is None else max_bytes
        fd = self._open_regular(key)
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise ObjectTooLargeError(
                    f"{self.root}/{key} is {size} bytes, more than the {limit} read", limit
                )
            data = _read_up_to(fd, limit + 1)  # one more: a file that grew meanwhile
        except OSError as exc:
            raise ArchiveError(f"cannot read {self.root}/{key}: {exc.strerror}") from exc
        finally:
            os.close(fd)
        if len(data) > limit:
            raise ObjectTooLargeError(f"{self.root}/{key} holds more than {limit} bytes", limit)
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self.requests["get"] += 1
        fd = self._open_regular(key)
        try:
            return os.pread(fd, max(0, end - start), start)
        except OSError as exc:
            raise ArchiveError(f"cannot read {self.root}/{key}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def _open_regular(self, key: str) -> int:
        """A read-only descriptor of the key's file; a FIFO, device or socket is refused before
        a blocking read (opened non-blocking, then checked)."""
        path = self._p(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"{self.root}/{key} does not exist") from exc
        except OSError as exc:
            raise ArchiveError(f"cannot read {self.root}/{key}: {exc.strerror}") from exc
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
            raise ArchiveError(f"{self.root}/{key} is not a regular file ({kind}): not read")
        return fd

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Keys under ``prefix`` after ``start_after``, sorted. Directories whose keys all sort
        at or before ``start_after`` are not entered; a directory that is entered is read with
        one ``listdir`` (names only: only the keys returned are stat'ed)."""
        after = start_after or ""
        found: list[str] = []
        self._collect(prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else "", prefix, after, found)
        found.sort()
        for key in found:
            try:
                size = os.path.getsize(os.path.join(self.path, key))
            except FileNotFoundError:
                continue  # deleted since the directory was read (a prune)
            self.requests["keys_listed"] += 1
            yield ObjectInfo(key, size)

    def _collect(self, rel: str, prefix: str, after: str, found: list[str]) -> None:
        """Keys under directory ``rel`` (``""`` or ending in "/") into ``found``."""
        try:
            self.requests["list"] += 1
            names = os.listdir(os.path.join(self.path, rel) if rel else self.path)
        except (FileNotFoundError, NotADirectoryError):
            return
        self.requests["dir_entries"] += len(names)  # what a listing costs here, whatever it keeps
        if after.startswith(rel):
            # by name alone (a directory of a year of chunks is mostly names at or before
            # ``after``): a name that could be a directory of keys after ``after`` (its
            # ``name/`` sorts after it, or holds it) stays; files are compared below
            tail = after[len(rel) :]
            names = [n for n in names if n + "/" > tail or tail.startswith(n + "/")]
        elif after > rel:
            return  # every key below ``rel`` sorts before ``after``
        deep = rel.startswith(prefix)  # every key below ``rel`` is under ``prefix``
        for name in names:
            key = rel + name
            if ".tmp-" in name:
                continue  # a write in progress (or killed): not an object
            if not deep and not (key.startswith(prefix) or prefix.startswith(key + "/")):
                continue
            if os.path.isdir(os.path.join(self.path, key)):
                self._collect(key + "/", prefix, after, found)
            elif key > after and key.startswith(prefix):
                found.append(key)

    def list_prefixes(self, prefix: str) -> list[str]:
        rel, _, partial = prefix.rpartition("/")
        rel = rel + "/" if rel else ""
        self.requests["list"] += 1
        try:
            names = os.listdir(os.path.join(self.path, rel) if rel else self.path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(
            f"{rel}{n}/"
            for n in names
            if n.startswith(partial) and os.path.isdir(os.path.join(self.path, rel + n))
        )

    def exists(self, key: str) -> bool:
        return os.path.exists(self._p(key))

    def delete(self, key: str) -> None:
        self.requests["delete"] += 1
        try:
            os.unlink(self._p(key))
        except FileNotFoundError:
            pass  # already gone; its folders may still be empty (an interrupted prune)
        if layout.in_node_folder(key):
            self._remove_empty_folders(key.split("/")[:-1], _NODE_DEPTH)

    def _remove_empty_folders(self, parts: list[str], keep: int) -> None:
        """Remove the folder ``parts`` and its parents while they are empty, keeping the first
        ``keep`` levels; stops at the first one that is not empty (or already gone)."""
        while len(parts) > keep:
            try:
                os.rmdir(os.path.join(self.path, *parts))
            except OSError:
                return  # not empty (a put, a sibling key), or removed by a concurrent delete
            parts = parts[:-1]


_NODE_DEPTH = 4  # v1/{cluster}/{brokerName}/{node}: a delete keeps the node's folder
_CREATE_ATTEMPTS = 100


def _token(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_up_to(fd: int, n: int) -> bytes:
    parts, left = [], n
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _create(tmp: str):
    """Open ``tmp`` for writing, creating its folders; again if a concurrent delete removed a
    folder just made (it was empty) before the file was created in it."""
    for _ in range(_CREATE_ATTEMPTS - 1):
        try:
            os.makedirs(os.path.dirname(tmp), exist_ok=True)
            return open(tmp, "wb")
        except (FileNotFoundError, FileExistsError):
            continue  # makedirs raises FileExistsError when a folder goes while it checks
    os.makedirs(os.path.dirname(tmp), exist_ok=True)
    return open(tmp, "wb")
