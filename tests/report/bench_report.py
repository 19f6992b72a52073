"""Size and build time of report.html for a 1 GiB audit, from synthetic outputs of the same
row counts (not a test: ``uv run python -m tests.report.bench_report [--groups N]``).

The shape is that of ``haproof bench audit --gib 1`` (a master and a slave, 1 GiB of log each,
compared in 64 MiB windows, ~1 M records of 1 KiB bodies on 8 queues) plus what a day of archive
adds: a snapshot every 10 s from each node (17,280 documents) and one committed offset per
consumer group and queue in each (``--groups`` consumer groups).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import pandas as pd

from contracts import archive_layout as layout
from contracts import audit_tables as at
from contracts.object_store import open_store
from expectations.evidence.publish import build_and_publish_report
from tests.report.runs import put_table

GIB = 1 << 30
WINDOW = 64 << 20
SNAP_EVERY_MS = 10_000
DAY_MS = 86_400_000
T0 = 1_790_000_000_000


def write(store, run_id: str, groups: int) -> dict:
    prefix = f"audits/{run_id}/broker-a/"
    ranges = [
        {
            "pair": "a-0->a-1",
            "master": "a-0",
            "node": "a-1",
            "start": s,
            "end": min(s + WINDOW, GIB),
            "bytes": min(WINDOW, GIB - s),
            "verdict": at.MATCH,
            "allowed": False,
            "lag_exceeded": False,
            "first_diff": None,
            "detail": "",
        }
        for s in range(0, GIB, WINDOW)
    ]
    times = np.arange(T0, T0 + DAY_MS, SNAP_EVERY_MS)
    for t in times:
        for node, role in (("a-0", "SYNC_MASTER"), ("a-1", "SLAVE")):
            snap = layout.Snapshot(
                node,
                "broker-a",
                0 if role != "SLAVE" else 1,
                role,
                1,
                int(t),
                GIB,
                GIB,
                GIB - 4096,
                {"a-1": GIB - int(t) % 100_000} if role != "SLAVE" else {},
            )
            store.put(layout.snapshot_key("bench", "broker-a", node, int(t)), snap.to_json())
    n = len(times)
    frames = []
    for g in range(groups):
        for node, role in (("a-0", "SYNC_MASTER"), ("a-1", "SLAVE")):
            for q in range(8):
                frames.append(
                    pd.DataFrame(
                        {
                            "taken_at": times,
                            "node": node,
                            "role": role,
                            "epoch": 1,
                            "group_name": f"g{g}",
                            "topic": "BenchTopic",
                            "queue_id": q,
                            "committed": np.arange(n) * 14,
                            "queue_max": np.arange(n) * 14.0 + 20,
                        }
                    )
                )
    timeline = pd.concat(frames)
    tables = {name: [] for name in at.TABLES}
    tables["ranges"] = ranges
    checks = [at.CheckResult(c, at.STATUS_PASS, 0, 1) for c in at.CHECKS]
    tables["checks"] = [
        {"check": c.check, "status": c.status, "findings": 0, "evidence": 1, "reason": ""}
        for c in checks
    ]
    for name, rows in tables.items():
        if name != "offset_timeline":
            put_table(store, prefix, name, rows)
    buf = __import__("io").BytesIO()
    timeline.to_parquet(buf, index=False)
    store.put_mutable(prefix + "offset_timeline.parquet", buf.getvalue())
    verdict = {
        "runId": run_id,
        "cluster": "bench",
        "brokerName": "broker-a",
        "master": "a-0",
        "window": {"since": None, "until": None},
        "status": at.RUN_PASSED,
        "passed": True,
        "checks": [c.to_json() for c in checks],
        "recordsChecked": 2 * 1_003_000,
    }
    store.put_mutable(prefix + "verdict.json", json.dumps(verdict).encode())
    return {"snapshots": 2 * n, "timeline_rows": len(timeline), "ranges": len(ranges)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=1, help="consumer groups (8 queues each)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-report-") as d:
        store = open_store(f"file://{d}")
        shape = write(store, "bench", args.groups)
        runs = []
        for _ in range(2):
            t0 = time.monotonic()
            key = build_and_publish_report(store, "bench", "broker-a")
            runs.append(time.monotonic() - t0)
        size = len(store.get(key))
    print(
        json.dumps(
            {
                **shape,
                "groups": args.groups,
                "report_bytes": size,
                "build_s": [round(s, 2) for s in runs],
            }
        )
    )


if __name__ == "__main__":
    main()
