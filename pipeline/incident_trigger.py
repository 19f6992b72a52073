"""The Airflow trigger that starts incident audits: it watches a cluster's archive for failover
events (``pipeline/incidents.py``) and fires one event per group that failed over.

Used through an ``AssetWatcher`` on the cluster's archive Asset (``dags/haproof_assets.py``):
each event it yields becomes an asset event (``extra["payload"]``: the :class:`Incident` as
JSON), which starts ``haproof_incident_audit`` for that group with the window around the
failover. It runs in Airflow's triggerer (so this module lives in an installed package, not in
the DAGs folder, and imports only Airflow's trigger base at import; the object store when it
runs). It starts from the time it first runs, and keeps where each node's listing resumes in
memory and, where the triggerer offers it, in the watched asset's state store (so a restarted
triggerer neither misses nor repeats a failover).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

log = logging.getLogger(__name__)

STATE_KEY = "haproof_failover_scan"


class ArchiveFailoverTrigger(BaseEventTrigger):
    """Poll ``root``'s ``cluster`` every ``poll_interval_s`` for failover events."""

    def __init__(
        self,
        root: str,
        cluster: str,
        endpoint_url: str | None = None,
        poll_interval_s: float = 5.0,
        before_ms: int | None = None,
        start_ms: int | None = None,
    ) -> None:
        super().__init__()
        self.root, self.cluster, self.endpoint_url = root, cluster, endpoint_url
        self.poll_interval_s = float(poll_interval_s)
        self.before_ms = before_ms
        self.start_ms = start_ms

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "root": self.root,
                "cluster": self.cluster,
                "endpoint_url": self.endpoint_url,
                "poll_interval_s": self.poll_interval_s,
                "before_ms": self.before_ms,
                "start_ms": self.start_ms,
            },
        )

    async def _load_marks(self) -> dict:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return {}
        try:
            raw = await store.aget(STATE_KEY)
            return json.loads(raw) if raw else {}
        except Exception as exc:  # no state yet, or a triggerer without the store
            log.info("no saved failover scan state: %s", exc)
            return {}

    async def _save_marks(self, doc: dict) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        try:
            await store.aset(STATE_KEY, json.dumps(doc))
        except Exception as exc:
            log.warning("failover scan state not saved: %s", exc)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from contracts.object_store import StoreSpec
        from pipeline.incidents import DEFAULT_BEFORE_MS, FailoverScan

        saved = await self._load_marks()
        store = await asyncio.to_thread(StoreSpec(self.root, endpoint_url=self.endpoint_url).open)
        scan = FailoverScan(
            store,
            self.cluster,
            start_ms=int(saved.get("startMs") or self.start_ms or time.time() * 1000),
            before_ms=self.before_ms if self.before_ms is not None else DEFAULT_BEFORE_MS,
            marks=dict(saved.get("marks") or {}),
        )
        log.info("watching %s/%s for failovers since %d ms", self.root, self.cluster, scan.start_ms)
        while True:
            try:
                incidents = await asyncio.to_thread(scan.poll)
            except Exception as exc:  # an unreachable store: keep watching
                log.warning("failover scan of %s failed: %s", self.root, exc)
                incidents = []
            if incidents:
                await self._save_marks({"startMs": scan.start_ms, "marks": scan.marks})
            for incident in incidents:
                log.info(
                    "failover in %s/%s at %d ms: %s",
                    self.cluster,
                    incident.broker_name,
                    incident.at_ms,
                    ", ".join(incident.kinds),
                )
                yield TriggerEvent(incident.to_json())
            await asyncio.sleep(self.poll_interval_s)
