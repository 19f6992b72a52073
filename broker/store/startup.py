"""Start-up checks of a store directory that turn a later, repeated failure into one line now."""

from __future__ import annotations

import fcntl
import logging
import os

from broker.store.consumer_offsets import ConsumerOffsetManager
from broker.store.store_config import StoreConfig
from contracts.errors import StoreError
from contracts.offset_commits.model import OFFSETS_TOPIC

log = logging.getLogger(__name__)


def lock_store_dir(root: str) -> int:
    """Create ``root`` and hold its ``lock`` file (one process per store); returns the
    descriptor to close at the end. StoreError when it cannot be made or is held."""
    lock_path = os.path.join(root, "lock")
    try:
        os.makedirs(root, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(
            f"store directory {root} (storePathRootDir): cannot create or lock "
            f"{exc.filename or lock_path}: {exc.strerror}"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StoreError(f"{root} is in use by another process (lock held)") from exc
    return fd


def warn_offsets_beyond_queues(offsets: ConsumerOffsetManager, shown: int = 20) -> None:
    """Committed offsets above their queue's max are kept (never lowered at start): say so."""
    for group, topic, qid, offset, top in offsets.beyond_queues()[:shown]:
        log.warning(
            "committed offset of %s on %s/%d is %d, above the queue's max offset %d "
            "(kept, never lowered at start; the audit reports it)",
            group,
            topic,
            qid,
            offset,
            top,
        )


def check_writable(*directories: str) -> None:
    """Offsets and topics are persisted every few seconds: a config directory (or store root)
    the node cannot write stops it at start, with one line, not with an error per write."""
    for directory in directories:
        probe = os.path.join(directory, ".write-probe")
        try:
            os.makedirs(directory, exist_ok=True)
            with open(probe, "wb") as fh:
                fh.write(b"ok")
                fh.flush()
                os.fsync(fh.fileno())
            os.unlink(probe)
        except OSError as exc:
            raise StoreError(
                f"{directory}: not writable ({exc.strerror}); the broker persists its "
                "offsets, topics and abort marker there"
            ) from exc


def offsets_restore_hint(cfg: StoreConfig) -> str:
    """Where committed offsets can be restored from, for the error that refuses to start."""
    where = [
        f"a slave's copy (config/consumerOffset.json in the store of another node of "
        f"{cfg.broker_name}, copied every slaveSyncIntervalMs)"
    ]
    if cfg.archive_root:
        where.append(
            f"the newest archived snapshot's consumerOffsets ({cfg.archive_root}/v1/"
            f"{cfg.broker_cluster_name}/{cfg.broker_name}/{cfg.node_name}/snapshots/)"
        )
    else:
        where.append("the newest archived snapshot's consumerOffsets (ROOT/v1/.../snapshots/)")
    return " or ".join(where)


def offsets_replayable(config, queries) -> bool:
    """offsetCommitThroughLog: every commit since the log began is a record still in it, so a
    lost ``consumerOffset.json`` is rebuilt from the log (broker/offset_log), not a loss."""
    return (
        bool(config.offset_commit_through_log)
        and queries.get_min_offset_in_queue(OFFSETS_TOPIC, 0) == 0
        and queries.get_max_offset_in_queue(OFFSETS_TOPIC, 0) > 0
    )
