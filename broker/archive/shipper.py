"""Ship commit log bytes to the archive as record-aligned, immutable chunks with manifests.

A chunk is written as ``.log`` first and its manifest ``.json`` last: the manifest is the commit
point. A ``.log`` without a manifest (a crash between the two puts) is ignored by readers and the
range is shipped again; because ``put`` never overwrites, re-shipping identical bytes is a no-op
and different bytes under the same key are an :class:`ArchiveConflictError`.

The shipper only reads through a :class:`CommitLogSource` (``sources.py``), so it serves a live
node (flushed bytes of its store) and a store directory on disk (ours or a real RocketMQ
broker's) alike; its record scans are ``contracts/record_walk.py``'s.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.archive.archive_tail import newest_snapshot_key, read_tail
from broker.archive.damage import DamageEvents, hole_after
from broker.archive.sources import CommitLogSource, StoreDirSource
from broker.clock import SYSTEM_CLOCK
from contracts import archive_layout as layout
from contracts.errors import ArchiveConflictError, ArchiveError, CorruptRecordError
from contracts.object_store import ObjectStore
from contracts.record_walk import (
    ScannedRecord,
    record_scanner,
    store_timestamp,
    walk_in_place,
)

log = logging.getLogger(__name__)

# re-exported: callers import the store directory source with the shipper
__all__ = [
    "CommitLogSource",
    "NodeIdentity",
    "ShipResult",
    "Shipper",
    "StoreDirSource",
    "check_resume",
]


def check_resume(node: str, start: int, end_limit: int) -> None:
    """Shipping resumes at ``start`` (where the archive ends): the log must reach it."""
    if start > end_limit:
        raise ArchiveError(
            f"node {node}: the archive holds its log up to {start} but the store ends at "
            f"{end_limit}; a truncated log is shipped under a new epoch after a 'truncated' event"
        )


@dataclass
class NodeIdentity:
    cluster: str
    broker_name: str
    node: str
    broker_id: int = 0
    role: str = "ASYNC_MASTER"
    epoch: int = 0


@dataclass
class ShipResult:
    chunks: list[layout.ChunkManifest] = field(default_factory=list)
    start: int = 0
    end: int = 0
    crc_failures: list[int] = field(default_factory=list)
    stopped_by: CorruptRecordError | None = None
    damage_event: str | None = None  # the log_damaged event written for stopped_by (new only)
    queue_max_offsets: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def bytes_shipped(self) -> int:
        return sum(c.end - c.start for c in self.chunks)


def _window(source: CommitLogSource, offset: int, end_limit: int):
    """(file start, the file's bytes, shippable limit in the file, ``offset`` in the file)."""
    fsize = source.mapped_file_size
    file_start = offset - offset % fsize
    view = source.file_view(file_start)
    return file_start, view, min(len(view), end_limit - file_start), offset - file_start


class _Chunks:
    """The chunk being assembled during one ``ship``: bytes copied out of the log, its record
    count and store-timestamp range; ``flush`` writes it (chunk, then manifest)."""

    def __init__(
        self, shipper: Shipper, fsize: int, start: int, end_limit: int, epoch: int, role: str
    ) -> None:
        self.shipper, self.fsize = shipper, fsize
        self.start, self.end_limit = start, end_limit
        self.epoch, self.role = epoch, role
        self.result = ShipResult(start=start, end=start)
        self._reset(start)

    def _reset(self, chunk_start: int) -> None:
        self.chunk_start, self.length, self.records = chunk_start, 0, 0
        self.first_ts = self.last_ts = 0
        self.pending: list[bytes] = []

    def note(self, records: int, length: int) -> None:
        self.records += records
        self.length += length

    def timestamps(self, first_ts: int, last_ts: int) -> None:
        self.first_ts = self.first_ts or first_ts
        self.last_ts = last_ts

    def add(self, data) -> None:
        if len(data):
            self.pending.append(bytes(data))

    def flush(self) -> None:
        if not self.length:
            return
        sh = self.shipper
        self.result.chunks.append(
            sh._put_chunk(
                b"".join(self.pending),
                self.chunk_start,
                self.records,
                self.first_ts,
                self.last_ts,
                self.fsize,
                self.epoch,
                self.role,
            )
        )
        self.result.end = self.chunk_start + self.length
        self._reset(self.result.end)
        if sh.progress:
            sh.progress(self.result.end - self.start, self.end_limit - self.start)


class Shipper:
    def __init__(
        self,
        store: ObjectStore,
        identity: NodeIdentity,
        chunk_max_bytes: int = 64 * 1024 * 1024,
        clock_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms,
        progress: Callable[[int, int], None] | None = None,
    ):
        if identity.role not in layout.ROLES:
            raise ArchiveError(f"role {identity.role!r} is not one of {', '.join(layout.ROLES)}")
        self.store = store
        self.id = identity
        self.chunk_max_bytes = chunk_max_bytes
        self.clock_ms = clock_ms
        self.progress = progress
        # the highest epoch a chunk of this node carries (learnt from the manifests, raised by
        # every put) and the epoch of the latest truncation: chunks after a truncation carry at
        # least that one, so they supersede the cut ones
        self.max_chunk_epoch = 0
        self.truncation_epoch = 0
        self.master_epochs: dict[int, str] = {}  # epoch -> role, of this node's master chunks
        self.damage = DamageEvents(store, self._prefix, self.put_event)

    # -- what the archive already holds ----------------------------------------------------------

    def manifests(self) -> list[layout.ChunkManifest]:
        """Every manifest of the node, in offset order: one GET per chunk (tools and tests;
        resuming reads only the archive's tail, see :meth:`archived_end`)."""
        prefix = self._prefix()
        out = []
        for info in self.store.list(prefix + layout.COMMITLOG):
            parsed = layout.parse_key(info.key)
            if parsed is None or parsed.kind != "manifest":
                continue
            out.append(layout.ChunkManifest.from_json(self.store.get(info.key), what=info.key))
        self.max_chunk_epoch = max([self.max_chunk_epoch, *(m.epoch for m in out)])
        for m in out:
            if m.role != "SLAVE":
                self.master_epochs.setdefault(m.epoch, m.role)
        return sorted(out, key=lambda m: (m.start, m.epoch))

    def archived_end(self) -> int | None:
        """End of the node's archived log (None when nothing was shipped yet).

        After a ``truncated`` event only chunks of its epoch or later count: the log continues
        from the truncation point (older chunks stay, immutable). Read from the newest end of
        the archive (``archive_tail.py``): a few listings and one GET per epoch seen there,
        whatever the archive's age.
        """
        tail = read_tail(self.store, self._prefix())
        self.max_chunk_epoch = max(self.max_chunk_epoch, tail.max_chunk_epoch)
        for epoch, role in tail.master_epochs.items():
            self.master_epochs.setdefault(epoch, role)
        if tail.truncation is not None:
            self.truncation_epoch = max(self.truncation_epoch, tail.truncation[0])
        return tail.end

    def _prefix(self) -> str:
        return layout.node_prefix(self.id.cluster, self.id.broker_name, self.id.node)

    def record_truncation(self, to_offset: int, new_epoch: int) -> str:
        """The log was cut back to ``to_offset``: write the ``truncated`` event (bytes
        [to_offset, archived end) left the log) and ship what follows under ``new_epoch`` or
        later (it must be above every chunk already shipped, so the cut chunks are superseded)."""
        end = self.archived_end()
        if end is None or to_offset >= end:
            raise ArchiveError(
                f"node {self.id.node}: truncation to {to_offset} but the archive ends at {end}"
            )
        if new_epoch <= self.max_chunk_epoch:
            raise ArchiveError(
                f"node {self.id.node}: a truncation needs a new epoch above {self.max_chunk_epoch}, "
                "the latest its chunks carry"
            )
        self.id.epoch = self.truncation_epoch = new_epoch
        return self.put_event("truncated", **{"from": end, "to": to_offset})

    # -- shipping ---------------------------------------------------------------------------------

    def ship(
        self,
        source: CommitLogSource,
        start: int | None = None,
        end: int | None = None,
        epoch: int | None = None,
        role: str | None = None,
    ) -> ShipResult:
        """Ship every complete record from ``start`` (default: where the archive ends) up to
        ``end`` (default: all that is shippable), as chunks of ``epoch`` and ``role`` (default:
        the identity's; a node labels each range with the epoch and role that wrote it)."""
        if start is None:
            archived = self.archived_end()
            start = source.min_offset() if archived is None else archived
        end_limit = source.shippable_end()
        if end is not None:
            end_limit = min(end_limit, max(end, start))
        check_resume(self.id.node, start, end_limit)
        out = _Chunks(
            self,
            source.mapped_file_size,
            start,
            end_limit,
            self.id.epoch if epoch is None else epoch,
            self.id.role if role is None else role,
        )
        self._ship_records(source, out)
        out.flush()
        if out.result.stopped_by is not None:  # the archive says why it ends here
            out.result.damage_event = self.damage.record(out.result.stopped_by)
        return out.result

    def _ship_records(self, source: CommitLogSource, out: _Chunks) -> None:
        """Chunks cut at record boundaries by the one record walk, ``chunk_max_bytes`` at most
        (one larger record alone). A store directory's records are decoded on the way (framing
        and body CRC: CRC failures and queue max offsets are reported); a source whose writer
        framed its records (``framing_trusted``, a live node's) is chained by TOTALSIZE and
        MAGIC with first and last store timestamps read from two records: a few Python steps
        per record instead of a decode (its archiver shares the interpreter with the send path).
        """
        trusted = source.framing_trusted
        on_record = None if trusted else self._noter(out)
        decode = None if trusted else record_scanner()
        offset = out.start
        while offset < out.end_limit:
            file_start, view, limit, rel = _window(source, offset, out.end_limit)
            end, n, last, why = walk_in_place(
                view,
                rel,
                base_offset=file_start,
                limit=limit,
                decode=decode,
                on_record=on_record,
                budget=self.chunk_max_bytes - out.length,
                take_first=not out.length,
                partial_is_end=trusted,
                source=_name(source),
            )
            if n:
                if trusted and last >= 0:  # the frame at rel is a message too (a BLANK ends)
                    out.timestamps(store_timestamp(view, rel), store_timestamp(view, last))
                out.note(n, end - rel)
                out.add(view[rel:end])
                offset = file_start + end
            if why == "budget":
                out.flush()
            elif why == "end":  # the written log ends inside this file, unless it goes on
                if not trusted:
                    args = (view, end, limit, file_start, out.end_limit, _name(source))
                    out.result.stopped_by = hole_after(*args)
                return
            elif why != "blank":
                out.result.stopped_by = why
                return

    @staticmethod
    def _noter(out: _Chunks) -> Callable[[ScannedRecord], None]:
        """What a decoded record adds to the result: its CRC failure, its queue's max offset,
        its store timestamp to the chunk's range."""
        result = out.result
        qmax = result.queue_max_offsets

        def note(rec: ScannedRecord) -> None:
            if not rec.crc_ok:
                log.warning("body CRC mismatch at %d: shipped as is", rec.physical_offset)
                result.crc_failures.append(rec.physical_offset)
            out.timestamps(rec.store_timestamp, rec.store_timestamp)
            q = qmax.setdefault(rec.topic, {})
            q[str(rec.queue_id)] = max(q.get(str(rec.queue_id), 0), rec.queue_offset + 1)

        return note

    def _put_chunk(
        self,
        data: bytes,
        start: int,
        records: int,
        first_ts: int,
        last_ts: int,
        fsize: int,
        epoch: int,
        role: str,
    ) -> layout.ChunkManifest:
        if role not in layout.ROLES:
            raise ArchiveError(f"role {role!r} is not one of {', '.join(layout.ROLES)}")
        end = start + len(data)
        key = layout.chunk_key(
            self.id.cluster, self.id.broker_name, self.id.node, start, end, epoch
        )
        digest = hashlib.sha256(data).hexdigest()
        self.store.put(key, data, sha256=digest)
        man = layout.ChunkManifest(
            start=start,
            end=end,
            records=records,
            firstStoreTs=first_ts,
            lastStoreTs=last_ts,
            sha256=digest,
            node=self.id.node,
            brokerId=self.id.broker_id,
            role=role,
            epoch=epoch,
            uploadedAt=self.clock_ms(),
            mappedFileSize=fsize,
        )
        mkey = layout.manifest_key(key)
        self.max_chunk_epoch = max(self.max_chunk_epoch, epoch)
        try:
            self.store.put(mkey, man.to_json())
        except ArchiveConflictError:
            # re-ship after a crash: the earlier manifest stands (uploadedAt differs)
            old = layout.ChunkManifest.from_json(self.store.get(mkey), what=mkey)
            if old.sha256 != man.sha256:
                raise ArchiveError(
                    f"{mkey}: archived chunk differs from the log (conflict)"
                ) from None
            return old
        return man

    # -- snapshots and events -------------------------------------------------------------------

    def put_event(self, kind: str, **fields) -> str:
        at = self.clock_ms()
        key = layout.event_key(self.id.cluster, self.id.broker_name, self.id.node, at, kind)
        doc = layout.make_event(
            kind, self.id.node, self.id.cluster, self.id.broker_name, at, self.id.epoch, **fields
        )
        layout.parse_event(doc)
        self.store.put(key, _json(doc))
        return key

    def latest_snapshot(self) -> layout.Snapshot | None:
        key = newest_snapshot_key(self.store, self._prefix())
        return None if key is None else layout.Snapshot.from_json(self.store.get(key), what=key)

    def put_snapshot(self, snap: layout.Snapshot) -> str:
        key = layout.snapshot_key(self.id.cluster, self.id.broker_name, self.id.node, snap.takenAt)
        self.store.put(key, snap.to_json())
        return key


def _json(doc: dict) -> bytes:
    import json

    return json.dumps(doc, sort_keys=True).encode()


def _name(source: CommitLogSource) -> str:
    return source.directory if isinstance(source, StoreDirSource) else type(source).__name__
