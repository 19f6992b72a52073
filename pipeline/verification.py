"""Continuous verification: how far behind the archive each group's verification is.

The verification lag of a group is now − the upload time of the newest chunk a passing audit
verified (``_audit/state.json``: each node's last verified chunk; its manifest's
``uploadedAt``). ``haproof_continuous_verification`` runs the incremental audit every few
minutes, then publishes the lags (``audits/_history/{cluster}/lag.json``, beside the history
page, and the task's XCom) and fails when one passes the bound. When the runs themselves stop
finishing (a hung Spark server, a lease never freed), the DAG's deadline fires instead:
``pipeline.deadline_alert.deadline_missed``, an ``AsyncCallback`` run by the triggerer.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from contracts import archive_layout as layout
from contracts.errors import ObjectNotFoundError

log = logging.getLogger(__name__)


def group_lag(store, cluster: str, group: str, now_ms: int) -> dict[str, Any]:
    """{"group", "lagMs" (None: never verified), "newestVerifiedUploadMs", "runId"}."""
    from spark_jobs.incremental import load_state

    state = load_state(store, cluster, group)
    newest = None
    for mark in state.nodes.values():
        if not mark.last_chunk:
            continue
        try:
            manifest = layout.ChunkManifest.from_json(
                store.get(layout.manifest_key(mark.last_chunk))
            )
        except ObjectNotFoundError:  # pruned since: its node's newer chunks count
            continue
        newest = max(newest or 0, manifest.uploadedAt)
    return {
        "group": group,
        "lagMs": None if newest is None else max(0, now_ms - newest),
        "newestVerifiedUploadMs": newest,
        "runId": state.run_id or None,
    }


def verification_lags(store, cluster: str, now_ms: int | None = None) -> list[dict[str, Any]]:
    from spark_jobs.archive_reader import list_broker_names

    now = int(time.time() * 1000) if now_ms is None else now_ms
    return [group_lag(store, cluster, g, now) for g in list_broker_names(store, cluster)]


def lag_key(cluster: str) -> str:
    from pipeline.history import HISTORY_DIR

    return f"{HISTORY_DIR}{layout.check_name('cluster', cluster)}/lag.json"


def publish_lags(store, cluster: str, lags: list[dict[str, Any]], bound_ms: int) -> dict:
    doc = {
        "cluster": cluster,
        "at": int(time.time() * 1000),
        "boundMs": bound_ms,
        "groups": lags,
        "late": [g["group"] for g in lags if g["lagMs"] is None or g["lagMs"] > bound_ms],
    }
    store.put_mutable(lag_key(cluster), json.dumps(doc, indent=2).encode())
    return doc
