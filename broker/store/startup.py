"""Start-up checks of a store directory that turn a later, repeated failure into one line now."""

from __future__ import annotations

import os

from broker.store.store_config import StoreConfig
from contracts.errors import StoreError


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
