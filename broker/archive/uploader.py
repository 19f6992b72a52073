"""The archiver's uploads in a child process: a :class:`Shipper` that lives outside the broker.

A live node's archiver (``node_archiver.py``) decides *what* to ship: which flushed byte ranges,
under which epoch and role, which snapshots and events. Reading those bytes, hashing them and
talking to object storage is the costly part (boto3's signing, checksums, HTTP), and inside the
broker it would share the interpreter lock with the send path: every time the upload thread
comes back from a socket call it takes the lock from the event loop. So a node runs the shipper
in a child process, at a lower CPU priority (``archiveNice``), and calls it over a pipe:

- the child maps the commit log files itself (read-only, by name under the store's
  ``commitlog/`` directory) and ships only below the flushed end the node sends with each call;
- every call carries the node's identity and clock, and every answer the shipper's state (the
  highest chunk epoch, the truncation epoch, the epochs this node's master chunks belong to), so
  the node's view is the child's;
- errors come back as the same exception types; a child that died is started again on the
  next call (the archive, not the child, holds the state to resume from);
- the child exits when the node's end of the pipe closes (the node stopped, or was killed).
"""

from __future__ import annotations

import logging
import mmap
import multiprocessing
import os
import threading
from dataclasses import dataclass, replace

from broker.archive.shipper import NodeIdentity, Shipper, ShipResult
from contracts.errors import ArchiveError

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SourceSpec:
    """Where the child finds the commit log and how far it may ship."""

    directory: str  # the store's commitlog/ directory
    mapped_file_size: int
    min_offset: int
    shippable_end: int  # flushed bytes end here (from the node, at the call)


class CommitLogFiles:
    """The child's view of a live commit log: its files mapped read-only, by start offset.

    A file deleted and created again at the same offset (a truncation, then new writes) is a new
    inode: it is mapped again. Only bytes below ``shippable_end`` (flushed by the node) are read.
    """

    framing_trusted = True  # the node's store framed every record

    def __init__(self, directory: str, mapped_file_size: int) -> None:
        self.directory = directory
        self.mapped_file_size = mapped_file_size
        self._maps: dict[int, tuple[int, mmap.mmap]] = {}  # start -> (inode, map)
        self._min = 0
        self._end = 0

    def bound(self, min_offset: int, shippable_end: int) -> CommitLogFiles:
        self._min, self._end = min_offset, shippable_end
        return self

    def min_offset(self) -> int:
        return self._min

    def shippable_end(self) -> int:
        return self._end

    def file_view(self, file_start: int) -> memoryview | bytes:
        path = os.path.join(self.directory, f"{file_start:020d}")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise ArchiveError(f"commit log file {path} is gone") from None
        cached = self._maps.get(file_start)
        if cached is not None and cached[0] == st.st_ino:
            return memoryview(cached[1])
        if st.st_size == 0:
            return b""
        with open(path, "rb") as fh:
            m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self._release(file_start)
        self._maps[file_start] = (st.st_ino, m)
        for old in sorted(self._maps)[:-4]:  # keep a few files mapped, not the whole log
            self._release(old)
        return memoryview(m)

    def _release(self, start: int) -> None:
        entry = self._maps.pop(start, None)
        if entry is not None:
            try:
                entry[1].close()
            except BufferError:  # a view of it is still alive: dropped with it
                pass

    def close(self) -> None:
        for start in list(self._maps):
            self._release(start)


@dataclass
class ShipperState:
    """What the node mirrors of the child's shipper after every call."""

    max_chunk_epoch: int = 0
    truncation_epoch: int = 0
    master_epochs: dict[int, str] | None = None


def _child_main(conn, store_options: dict, chunk_max_bytes: int, nice: int) -> None:
    """The child: one call at a time, until the pipe closes."""
    from contracts.object_store import open_store

    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s archiver-child %(message)s")
    now = [0]
    shipper: Shipper | None = None
    files: CommitLogFiles | None = None
    while True:
        try:
            identity, now_ms, method, args, kwargs = conn.recv()
        except (EOFError, OSError):
            break  # the node is gone
        now[0] = now_ms
        try:
            if shipper is None:
                shipper = Shipper(
                    open_store(**store_options), identity, chunk_max_bytes, clock_ms=lambda: now[0]
                )
            shipper.id = identity
            if method == "ready":  # started: modules imported, object store client made
                result = os.getpid()
            elif method == "ship":
                spec: SourceSpec = args[0]
                if files is None or files.directory != spec.directory:
                    files = CommitLogFiles(spec.directory, spec.mapped_file_size)
                files.bound(spec.min_offset, spec.shippable_end)
                result = shipper.ship(files, *args[1:], **kwargs)
                if result.stopped_by is not None:
                    result.stopped_by = _picklable(result.stopped_by)
            else:
                result = getattr(shipper, method)(*args, **kwargs)
            state = ShipperState(
                shipper.max_chunk_epoch, shipper.truncation_epoch, dict(shipper.master_epochs)
            )
            reply = ("ok", result, shipper.id, state)
        except Exception as exc:  # sent back to the node, raised there
            reply = ("error", _picklable(exc), None, None)
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            break
    if files is not None:
        files.close()


def _picklable(exc: Exception) -> Exception:
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return ArchiveError(f"{type(exc).__name__}: {exc}")


class ShipperProcess:
    """The node's handle on a shipper in a child process; the same calls as :class:`Shipper`
    that a node makes (``ship`` takes a :class:`SourceSpec` instead of a source).

    No process is started in ``__init__``: the first call starts it. Calls come from the
    node's archiver thread, one at a time (a lock keeps it so).
    """

    def __init__(
        self,
        store_options: dict,
        identity: NodeIdentity,
        chunk_max_bytes: int,
        clock_ms,
        nice: int = 10,
    ) -> None:
        self.store_options = store_options
        self.id = identity
        self.chunk_max_bytes = chunk_max_bytes
        self.clock_ms = clock_ms
        self.nice = nice
        self.max_chunk_epoch = 0
        self.truncation_epoch = 0
        self.master_epochs: dict[int, str] = {}
        self._proc = None
        self._conn = None
        self._lock = threading.Lock()
        self.starts = 0  # child processes started (a restart after a crash counts)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    def _ensure(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            return
        if self._proc is not None:
            log.warning(
                "archiver child (pid %s) exited with %s; starting another",
                self._proc.pid,
                self._proc.exitcode,
            )
            self._drop()
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=_child_main,
            args=(child, self.store_options, self.chunk_max_bytes, self.nice),
            name="haproof-archiver",
            daemon=True,
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.starts += 1

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def _call(self, method: str, *args, **kwargs):
        with self._lock:
            self._ensure()
            try:
                self._conn.send((replace(self.id), self.clock_ms(), method, args, kwargs))
                status, result, identity, state = self._conn.recv()
            except (EOFError, OSError) as exc:
                self._proc.join(1)  # reaped, so its exit code is known
                code = self._proc.exitcode
                self._drop()
                raise ArchiveError(
                    f"archiver child process died during {method} (exit code {code})"
                ) from exc
        if status == "error":
            raise result
        self.id = identity
        self.max_chunk_epoch = state.max_chunk_epoch
        self.truncation_epoch = state.truncation_epoch
        self.master_epochs = state.master_epochs or {}
        return result

    def start(self) -> int:
        """Start the child and wait until it can take calls (its imports and the object store
        client take a noticeable CPU burst: better before the node serves than during its first
        load). Returns its pid."""
        return self._call("ready")

    # -- the Shipper calls a node makes ---------------------------------------------------------

    def ship(self, spec: SourceSpec, start=None, end=None, epoch=None, role=None) -> ShipResult:
        return self._call("ship", spec, start, end=end, epoch=epoch, role=role)

    def archived_end(self) -> int | None:
        return self._call("archived_end")

    def record_truncation(self, to_offset: int, new_epoch: int) -> str:
        return self._call("record_truncation", to_offset, new_epoch)

    def put_event(self, kind: str, **fields) -> str:
        return self._call("put_event", kind, **fields)

    def put_snapshot(self, snap) -> str:
        return self._call("put_snapshot", snap)

    def close(self) -> None:
        """Close the pipe (the child exits after its current call) and wait for it."""
        with self._lock:
            proc, conn = self._proc, self._conn
            self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            proc.join(JOIN_TIMEOUT_S)
            if proc.is_alive():
                log.warning(
                    "archiver child (pid %s) still busy after %.0f s; killing it",
                    proc.pid,
                    JOIN_TIMEOUT_S,
                )
                proc.kill()
                proc.join(5)
