"""Archiving inside a broker node (``archiveEnable=true``): DESIGN.md section 3, live.

- Every ``archiveIntervalMs`` a worker thread ships the store's **flushed** bytes as
  record-aligned immutable chunks (``Shipper``), resuming from what the archive already holds;
  appends never wait for object storage. Each chunk carries the epoch and role that wrote its
  bytes (the node's epoch file), cut at epoch starts.
- The shipper itself (reading the files, hashing, uploading) runs in a child process at nice
  ``archiveNice`` (``uploader.py``); ``archiveInProcess=true`` keeps it in the worker thread.
- Snapshots every ``snapshotIntervalMs`` and at every role change: role, epoch, offsets, each
  slave's ack offset (by node name) and the confirm offset from the HA service, strict-JSON
  consumer offsets, queue max offsets, delay offsets, dataVersion, mappedFileSize.
- Events: ``started``; ``recovered`` (the log end found at start and the end kept after a crash);
  ``role_changed``; ``truncated`` (a rejoining node cut its log back); ``master_lost`` (a slave's
  HA connection to its master went away); ``offset_reset`` (when the node reports one); in
  controller mode ``lease_lost`` and ``sync_state_set_changed`` (``record_event``).
- Storage trouble (no bucket, bad credentials, endpoint down, disk full) is logged once per
  change of state, never reaches the send path, and the worker retries with backoff; the archive
  catches up when storage returns. ``runtime_info`` reports the archive lag (bytes, ms).

The event loop builds snapshot documents and event fields (they read node state); the worker
thread makes every shipper call, in order, from one queue.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from broker.archive.node_view import LiveStoreSource, NodeView, epoch_ranges
from broker.archive.shipper import Shipper, check_resume
from broker.archive.uploader import ShipperProcess, SourceSpec
from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import BrokerConfig
from broker.ha.role_services import RoleServices
from broker.loop_service import Periodic
from broker.node_parts import TruncationListeners
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts.errors import ArchiveConflictError, ArchiveError, HaproofError
from contracts.object_store import open_store

__all__ = ["LiveStoreSource", "NodeArchiver", "epoch_ranges"]

log = logging.getLogger(__name__)

BACKOFF_MAX_S = 30.0
WATCH_MASTER_MS = 500  # how often a slave's archiver looks at its master connection


def now_ms() -> int:
    return SYSTEM_CLOCK.wall_ms()


class NodeArchiver:
    """A node service. ``start()`` does no object-store I/O itself: the worker does.

    ``role`` is the node's role state (the store's when not given), ``replication`` its role
    services (the HA status in snapshots, the slave's master connection; None: none),
    ``truncations`` the node's listeners this archiver joins (None: no truncations) and
    ``clock`` what its loops and the worker's cadence read time from."""

    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        node_name: str,
        *,
        role: BrokerRoleState | None = None,
        replication: RoleServices | None = None,
        truncations: TruncationListeners | None = None,
        clock_ms: Callable[[], int] = now_ms,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.config = config
        self.node_name = node_name
        self.role = role or store.role_state
        self.replication = replication
        self.truncations = truncations
        self.clock = clock
        self.view = NodeView(store, config, self.role, node_name, replication)
        self.clock_ms = clock_ms
        self._jobs: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._loops = [
            Periodic(
                "archive-snapshots",
                period_ms=config.snapshot_interval_ms,
                round_=self._snapshot_round,
                clock=clock,
            ),
            Periodic(
                "archive-watch-master",
                period_ms=WATCH_MASTER_MS,
                round_=self._watch_master_round,
                clock=clock,
            ),
        ]
        self._was_connected = False  # the slave's master connection at the last watch round
        self.shipper: Shipper | None = None
        self.archived_end = 0  # end of what the archive holds
        self.archived_at_ms = 0  # when the archive last caught up with the flushed log
        self.last_error: str | None = None
        self.chunks_shipped = 0
        self.snapshots_written = 0
        self._next_start: int | None = None  # None: ask the archive where it ends
        self.rounds = 0  # worker rounds done (tests wait on it)
        self._held_since: float | None = None  # monotonic s: first round that held bytes back
        # epoch -> the master role this node had in it (seen at start and at promotions): a
        # chunk is labelled with the epoch and role that wrote its bytes, not the current ones
        self._mastered: dict[int, str] = {}

    # -- lifecycle (event loop) -----------------------------------------------------------------

    async def start(self) -> None:
        import asyncio

        cfg = self.config
        store = self.store
        store_options = {
            "root": cfg.archive_root,
            "endpoint_url": cfg.archive_s3_endpoint,
            "region": cfg.archive_s3_region,
        }
        if cfg.archive_in_process:
            self.shipper = Shipper(
                open_store(**store_options),
                self.view.identity(),
                cfg.archive_chunk_max_bytes,
                clock_ms=self.clock_ms,
            )
        else:  # a child process, ready before the node serves
            self.shipper = ShipperProcess(
                store_options,
                self.view.identity(),
                cfg.archive_chunk_max_bytes,
                clock_ms=self.clock_ms,
                nice=cfg.archive_nice,
            )
            try:
                pid = await asyncio.get_running_loop().run_in_executor(None, self.shipper.start)
                log.info("archiver child process %d ready (nice %d)", pid, cfg.archive_nice)
            except HaproofError as exc:  # the worker starts it again on its first call
                log.error("archiver child process did not start: %s", exc)
        self.role.listeners.append(self._on_role_changed)
        if self.truncations is not None:
            self.truncations.add(self._on_truncated)
        store.consumer_offsets.reset_listeners.append(self._on_offset_reset)
        for name, fields in self.view.start_events():
            self._jobs.put(("event", name, fields))
        self._jobs.put(("snapshot", self.view.snapshot(self.clock_ms)))
        self.archived_at_ms = self.clock_ms()
        self._thread = threading.Thread(target=self._run, name="archiver", daemon=True)
        self._thread.start()
        for loop in self._loops:
            loop.start()
        log.info("archiving to %s as node %s", cfg.archive_root, self.node_name)

    async def stop(self) -> None:
        import asyncio

        for loop in self._loops:
            await loop.stop()
        if self._thread is None:
            return
        # Stopping: flush first, so the last round ships every byte the final snapshot (and a
        # slave's ack in it) covers; otherwise an ASYNC_FLUSH tail would be acked but unshipped.
        try:
            self.store.flush_all()
        except Exception:
            log.exception("flush before the final archive round failed")
        self._jobs.put(("snapshot", self.view.snapshot(self.clock_ms)))
        self._jobs.put(("ship", None))
        self._stop.set()
        self._wake.set()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 30)
        if self._thread.is_alive():
            log.warning("archiver still busy after 30 s at shutdown; leaving it behind")
        elif isinstance(self.shipper, ShipperProcess):
            await asyncio.get_running_loop().run_in_executor(None, self.shipper.close)

    # -- node hooks (event loop) ----------------------------------------------------------------

    def _on_role_changed(self, old_role, new_role, epoch: int) -> None:
        if new_role.is_master:
            self._mastered[epoch] = new_role.value
        self._jobs.put(("identity", self.view.identity()))
        self._jobs.put(("event", "role_changed", {"from": old_role.value, "to": new_role.value}))
        self._jobs.put(("snapshot", self.view.snapshot(self.clock_ms)))
        self._wake.set()

    def _on_truncated(self, from_offset: int, to_offset: int) -> None:
        self._jobs.put(("truncated", (from_offset, to_offset, self.role.epoch)))
        self._wake.set()

    def _on_offset_reset(self, group: str, topic: str, queue_id: int, from_off: int, to_off: int):
        fields = {"group": group, "topic": topic, "queue": queue_id, "from": from_off, "to": to_off}
        self._jobs.put(("event", "offset_reset", fields))
        self._wake.set()

    def record_event(self, kind: str, fields: dict) -> None:
        """An event another part of the node records (controller mode: ``lease_lost``,
        ``sync_state_set_changed``), archived in order with the node's own."""
        self._jobs.put(("event", kind, dict(fields)))
        self._wake.set()

    async def _snapshot_round(self) -> None:
        self._jobs.put(("snapshot", self.view.snapshot(self.clock_ms)))

    async def _watch_master_round(self) -> None:
        """A slave that loses its master says so once (``master_lost``)."""
        client = self.replication.ha_client if self.replication is not None else None
        connected = bool(client is not None and client.connected)
        if self._was_connected and not connected and client is not None:
            self._jobs.put(("event", "master_lost", {"master": client.master_ha_addr or ""}))
            self._wake.set()
        self._was_connected = connected

    def handlers(self) -> dict:
        return {}

    def runtime_info(self) -> dict[str, object]:
        flushed = self.store.commit_log.flushed_offset
        lag_bytes = max(0, flushed - self.archived_end)
        lag_ms = 0 if lag_bytes == 0 else max(0, self.clock_ms() - self.archived_at_ms)
        return {
            "archiveLagBytes": lag_bytes,
            "archiveLagMs": lag_ms,
            "archiveEnd": self.archived_end,
            "archiveChunks": self.chunks_shipped,
            "archiveLastError": self.last_error or "",
        }

    # -- the worker thread ----------------------------------------------------------------------

    def _run(self) -> None:
        interval_s = self.config.archive_interval_ms / 1000
        backoff_s = 0.0
        pending: list = []
        while True:
            round_start = self._monotonic_s()
            stopping = self._stop.is_set()
            while True:
                try:
                    pending.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            try:
                # a final round, or news of a role, an epoch or a truncation: ship all now
                force = stopping or any(job[0] != "snapshot" for job in pending)
                while pending:
                    self._do(pending[0])
                    pending.pop(0)
                self._ship(force)
                backoff_s = 0.0
                self._set_error(None)
            except HaproofError as exc:
                self._set_error(str(exc))
                backoff_s = min(max(backoff_s * 2, interval_s), BACKOFF_MAX_S)
            except Exception as exc:  # never let the worker die: the node keeps serving
                log.exception("archiver failed")
                self._set_error(f"{type(exc).__name__}: {exc}")
                backoff_s = min(max(backoff_s * 2, interval_s), BACKOFF_MAX_S)
            if stopping:
                if pending:
                    log.warning("archiver stopping with %d job(s) not written", len(pending))
                return
            # the cadence counts from the round's start: a round that took the whole interval
            # (the archive is behind) is followed by the next one at once
            self.rounds += 1
            wait_s = backoff_s or max(0.0, interval_s - (self._monotonic_s() - round_start))
            self.clock.wait_event_ms(self._wake, wait_s * 1000)
            self._wake.clear()

    def _monotonic_s(self) -> float:
        return self.clock.monotonic_ms() / 1000

    def _set_error(self, message: str | None) -> None:
        """One ERROR when archiving starts failing, one INFO when it works again; while it
        keeps failing (each round names another key) the details go to DEBUG."""
        if message is None:
            if self.last_error is not None:
                log.info("archive storage is reachable again; catching up")
        elif self.last_error is None:
            log.error("archiving to %s failed (will retry): %s", self.config.archive_root, message)
        elif message != self.last_error:
            log.debug("archiving still failing: %s", message)
        self.last_error = message

    def _do(self, job) -> None:
        kind, arg = job[0], job[1:]
        shipper = self.shipper
        if kind == "event":
            name, fields = arg
            shipper.put_event(name, **fields)
        elif kind == "snapshot":
            snap = arg[0]
            while True:
                try:
                    shipper.put_snapshot(snap)
                    break
                except ArchiveConflictError:
                    # another snapshot was taken in the same millisecond (a role change next to
                    # a periodic one): the key is its time, so this one takes the next free ms
                    snap.takenAt += 1
            self.snapshots_written += 1
        elif kind == "identity":  # what later events say; chunks carry their bytes' own labels
            new = arg[0]
            shipper.id.broker_id, shipper.id.role = new.broker_id, new.role
            shipper.id.epoch = max(shipper.id.epoch, new.epoch)
        elif kind == "truncated":
            from_offset, to_offset, epoch = arg[0]
            end = shipper.archived_end()
            if end is not None and to_offset < end:
                shipper.record_truncation(to_offset, max(epoch, shipper.max_chunk_epoch + 1))
            else:  # nothing archived left the log; record what did
                shipper.id.epoch = max(epoch, shipper.id.epoch)
                shipper.put_event("truncated", **{"from": from_offset, "to": to_offset})
            self.archived_end = min(self.archived_end, to_offset)
            self._next_start = None
        elif kind == "ship":
            pass  # a final round happens in _run after the queue drains

    def _hold(self, start: int, target: int, force: bool) -> bool:
        """Keep a small tail back for a later, larger chunk: fewer than
        ``archive_chunk_min_bytes`` new bytes wait, but never longer than the max age (so
        flushed bytes reach the archive within it), and a final round or one after a failed
        round (not a success in between: one ERROR while it keeps failing) ships everything."""
        cfg = self.config
        min_bytes = min(cfg.archive_chunk_min_bytes, cfg.archive_chunk_max_bytes)
        if force or self.last_error or target - start >= min_bytes or target <= start:
            self._held_since = None
            return False
        max_age_s = (cfg.archive_chunk_max_age_ms or 6 * cfg.archive_interval_ms) / 1000
        now = self._monotonic_s()
        if self._held_since is None:
            self._held_since = now
        if now - self._held_since < max_age_s:
            return True
        self._held_since = None
        return False

    def _ship(self, force: bool = True) -> None:
        shipper, state = self.shipper, self.role
        epoch_now = state.epoch
        shipper.id.epoch = max(shipper.id.epoch, epoch_now)  # events say the current epoch
        role = state.role
        if role.is_master:
            self._mastered.setdefault(epoch_now, role.value)
        entries = state.epoch_entries
        live = LiveStoreSource(self.store)
        target = live.shippable_end()
        source = live
        if isinstance(shipper, ShipperProcess):  # the child maps the files itself
            source = SourceSpec(
                self.store.commit_log.queue.directory,
                live.mapped_file_size,
                live.min_offset(),
                target,
            )
        start = self._next_start
        if start is None:
            archived = shipper.archived_end()
            start = live.min_offset() if archived is None else archived
        check_resume(shipper.id.node, start, target)
        if self._hold(start, target, force):
            return
        # one ship per epoch range: a backlog that spans a promotion (the archiver was behind
        # when this slave became master) keeps the old epoch and SLAVE for the old bytes
        for seg_start, seg_end, epoch in epoch_ranges(entries, start, target, epoch_now):
            result = shipper.ship(
                source,
                seg_start,
                end=seg_end,
                epoch=max(epoch, shipper.truncation_epoch),
                role=self._role_in(epoch),
            )
            self.chunks_shipped += len(result.chunks)
            self.archived_end = self._next_start = result.end
            if result.stopped_by is not None:
                raise ArchiveError(f"shipping stopped at a bad record: {result.stopped_by}")
            if result.end < seg_end:
                break  # the flushed log ends inside a record; the rest ships next round
        if self.archived_end >= target:
            self.archived_at_ms = self.clock_ms()

    def _role_in(self, epoch: int) -> str:
        """The role this node had while ``epoch``'s bytes were written: the master role if it
        was promoted into (or started as master in) that epoch or its archive holds master
        chunks of it, its current role where the group
        runs without epochs, else SLAVE (it copied them)."""
        mastered = self._mastered.get(epoch) or self.shipper.master_epochs.get(epoch)
        if mastered is not None:
            return mastered
        return self.role.role.value if epoch == 0 else "SLAVE"
