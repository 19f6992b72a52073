"""The haproof Assets (not a DAG file: listed in .airflowignore), for the cluster the
deployment audits (``HAPROOF_ARCHIVE_ROOT`` / ``HAPROOF_CLUSTER``, read when a DAG file is
parsed; unset: no Asset, the DAGs run by hand and on their schedules only):

- ``haproof_archive_{cluster}`` (``{root}/v1/{cluster}/``): the cluster's archive, watched by
  ``pipeline.incident_trigger.ArchiveFailoverTrigger`` (an ``AssetWatcher``): a failover event
  landing in the archive starts ``haproof_incident_audit`` for its group;
- ``haproof_verified_{cluster}`` (``{root}/audits/``): updated by every audit run that passed
  (the ``report`` task's outlet; the event's extra names the run and its reports), so a
  downstream DAG can run on a verified archive (``schedule=[verified_asset()]``).

Parsing imports only the trigger's module (Airflow's trigger base), nothing else of the project.
"""

from __future__ import annotations

import os

from airflow.sdk import Asset, AssetWatcher


def _target() -> tuple[str, str] | None:
    root, cluster = os.environ.get("HAPROOF_ARCHIVE_ROOT"), os.environ.get("HAPROOF_CLUSTER")
    return (root.rstrip("/"), cluster) if root and cluster else None


def archive_asset(*, watch: bool) -> Asset | None:
    """The cluster's archive; with ``watch``, its failover watcher."""
    target = _target()
    if target is None:
        return None
    root, cluster = target
    watchers = []
    if watch:
        from pipeline.incident_trigger import ArchiveFailoverTrigger

        trigger = ArchiveFailoverTrigger(
            root,
            cluster,
            endpoint_url=os.environ.get("HAPROOF_S3_ENDPOINT") or None,
            poll_interval_s=float(os.environ.get("HAPROOF_FAILOVER_POLL_S") or 5),
            # failovers from this time (epoch ms; default: from when the watcher first runs)
            start_ms=int(os.environ["HAPROOF_FAILOVER_SINCE_MS"])
            if os.environ.get("HAPROOF_FAILOVER_SINCE_MS")
            else None,
        )
        watchers = [AssetWatcher(name=f"haproof_failovers_{cluster}", trigger=trigger)]
    return Asset(
        name=f"haproof_archive_{cluster}",
        uri=f"{root}/v1/{cluster}/",
        group="haproof",
        watchers=watchers,
    )


def verified_asset() -> Asset | None:
    """What passing audits publish (the ``report`` task's outlet)."""
    target = _target()
    if target is None:
        return None
    root, cluster = target
    return Asset(name=f"haproof_verified_{cluster}", uri=f"{root}/audits/", group="haproof")
