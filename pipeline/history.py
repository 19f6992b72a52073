"""The history of a cluster's audits: ``haproof audit history`` and the index page beside the
reports.

One row per (run, group), newest run first, read from what every run already writes: the run's
``audits/{runId}/verdict.json`` (its cluster and groups) and each group's
``audits/{runId}/{group}/verdict.json``::

    {"runId", "group", "at" (ms, from the run id; null if the id is not a time), "status",
     "passed", "window": {"since", "until"}, "checks": {name: status}, "findings",
     "bytesVerified" (bytes of matching ranges), "lagBytes" (bytes of lag ranges: how far the
     slaves trailed at the end of the run), "blindBytes" (bytes of unverifiable ranges: what the
     run could not judge), "seconds" (the group's audit), "recordsChecked", "reportUrl"}

The page (``expectations/history_page.py``) is written to ``audits/_history/{cluster}/
index.html`` after each run's reports (:func:`publish_history`): a table of the nights and
their trends (findings, bytes verified, replication lag, blind window, duration).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from contracts import archive_layout as layout
from contracts import audit_tables as T
from contracts.errors import ArchiveError, AuditInputError, ObjectNotFoundError

log = logging.getLogger(__name__)

DEFAULT_LAST = 90  # runs read (the newest), for the command and the page
HISTORY_DIR = "audits/_history/"  # "_history" cannot be a run id (they begin alphanumeric)
VERDICT_MAX_BYTES = 64 * 1024 * 1024
READERS = 8


def history_page_key(cluster: str) -> str:
    return f"{HISTORY_DIR}{layout.check_name('cluster', cluster)}/index.html"


@dataclass
class History:
    cluster: str
    root: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "runId: why"

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "root": self.root,
            "runs": self.rows,
            "skipped": self.skipped,
        }


def run_time_ms(run_id: str) -> int | None:
    """The time a generated run id begins with (``20261126T020000Z-ab12cd``), else None."""
    try:
        t = dt.datetime.strptime(run_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return int(t.timestamp() * 1000)


def _read_json(store, key: str) -> dict[str, Any]:
    data = store.get(key)
    if len(data) > VERDICT_MAX_BYTES:
        raise ValueError(f"{key} is over {VERDICT_MAX_BYTES} bytes")
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError(f"{key} is not a JSON object")
    return doc


def group_row(store, run_id: str, v: dict[str, Any]) -> dict[str, Any]:
    """One history row from a group's verdict document."""
    nbytes = v.get("bytes") or {}
    group = str(v["brokerName"])
    return {
        "runId": run_id,
        "group": group,
        "at": run_time_ms(run_id),
        "status": v["status"],
        "passed": bool(v.get("passed")),
        "window": v.get("window") or {"since": None, "until": None},
        "checks": {c["name"]: c["status"] for c in v.get("checks", [])},
        "findings": sum(int(c.get("findings") or 0) for c in v.get("checks", [])),
        "bytesVerified": int(nbytes.get(T.MATCH, 0)),
        "lagBytes": int(nbytes.get(T.LAG, 0)),
        "blindBytes": int(nbytes.get(T.UNVERIFIABLE, 0)),
        "seconds": v.get("seconds"),
        "recordsChecked": v.get("recordsChecked"),
        "reportUrl": f"{store.root.rstrip('/')}/{layout.audit_report_key(run_id, group)}",
    }


def _run_rows(store, cluster: str, run_id: str) -> list[dict[str, Any]]:
    """The rows of one run (none when it audited another cluster)."""
    run = _read_json(store, layout.audit_verdict_key(run_id))
    if run.get("cluster") != cluster:
        return []
    if run.get("brokerName"):  # a one-group run: its verdict is the group's
        return [group_row(store, run_id, run)]
    groups = [str(g) for g in run.get("groups", [])]
    return [
        group_row(store, run_id, _read_json(store, layout.audit_verdict_key(run_id, g)))
        for g in groups
    ]


def collect_history(store, cluster: str, last: int = DEFAULT_LAST) -> History:
    """The newest ``last`` runs of ``cluster`` under the store's ``audits/``."""
    layout.check_name("cluster", cluster)
    prefixes = store.list_prefixes("audits/")
    ids = sorted(
        (p[len("audits/") :].rstrip("/") for p in prefixes),
        reverse=True,
    )
    ids = [i for i in ids if not i.startswith("_")]
    hist = History(cluster, store.root)
    read = 0

    def one(run_id: str):
        try:
            return run_id, _run_rows(store, cluster, run_id), None
        except ObjectNotFoundError:
            return run_id, [], "no verdict.json (a run that did not finish)"
        except (ArchiveError, ValueError, KeyError, TypeError) as exc:
            return run_id, [], f"unreadable verdict: {exc}"

    with ThreadPoolExecutor(READERS) as pool:
        # in batches, newest first, until ``last`` runs of this cluster are found
        for start in range(0, len(ids), READERS * 4):
            for run_id, rows, why in pool.map(one, ids[start : start + READERS * 4]):
                if read >= last:
                    break
                if why:
                    hist.skipped.append(f"{run_id}: {why}")
                elif rows:
                    hist.rows += rows
                    read += 1
            if read >= last:
                break
    return hist


def publish_history(store, cluster: str, last: int = DEFAULT_LAST) -> str:
    """Write the cluster's index page; its URL."""
    from expectations.history_page import render_history

    hist = collect_history(store, cluster, last)
    key = history_page_key(cluster)
    store.put_mutable(key, render_history(hist.to_json()).encode())
    return f"{store.root.rstrip('/')}/{key}"


# -- haproof audit history ----------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``haproof audit history --root R --cluster C [--json] [--last N]`` beside the audit's own
    options (``pipeline/cli.py`` hands the parser here)."""
    p.add_argument(
        "verb",
        nargs="?",
        choices=["history"],
        default=None,
        help="history: list the cluster's audit runs (table, or --json) instead of auditing",
    )
    p.add_argument("--last", type=int, default=DEFAULT_LAST, help="history: newest N runs")


def _fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M")


def print_history(hist: History, out=sys.stdout) -> None:
    names = sorted({n for r in hist.rows for n in r["checks"]}, key=_check_order)
    head = [
        "run",
        "group",
        "window",
        "status",
        *[_short(n) for n in names],
        "findings",
        "verified",
        "lag",
        "blind",
        "secs",
    ]
    rows = [head]
    for r in hist.rows:
        w = r["window"]
        rows.append(
            [
                r["runId"],
                r["group"],
                f"{_fmt_ms(w.get('since'))}..{_fmt_ms(w.get('until'))}",
                r["status"],
                *[r["checks"].get(n, "-") for n in names],
                str(r["findings"]),
                str(r["bytesVerified"]),
                str(r["lagBytes"]),
                str(r["blindBytes"]),
                "-" if r["seconds"] is None else f"{r['seconds']:.1f}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)
    for s in hist.skipped:
        print(f"skipped {s}", file=out)


def _check_order(name: str) -> int:
    return T.CHECKS.index(name) if name in T.CHECKS else len(T.CHECKS)


def _short(name: str) -> str:
    return "".join(w[0] for w in name.split("_")) if "_" in name else name[:4]


def run(args: argparse.Namespace) -> int:
    """``haproof audit history``: exit 0, or 2 on an unreadable root or a bad cluster name."""
    from contracts.object_store import StoreSpec

    if args.last < 1:
        raise AuditInputError(f"--last must be >= 1, got {args.last}")
    import os

    root = args.root or os.environ.get("HAPROOF_ARCHIVE_ROOT")
    cluster = args.cluster or os.environ.get("HAPROOF_CLUSTER")
    if not root or not cluster:
        raise AuditInputError("history needs --root and --cluster (or their environment)")
    try:
        store = StoreSpec(root, endpoint_url=args.endpoint_url).open()
        hist = collect_history(store, cluster, args.last)
    except (ArchiveError, ValueError) as exc:
        raise AuditInputError(f"history of {root}: {exc}") from exc
    if args.json:
        json.dump(hist.to_json(), sys.stdout, indent=2)
        print()
    else:
        print_history(hist)
    return 0
