"""Issue 28's finding 6 with real ``haproof archive``, ``haproof audit`` and ``haproof report``
processes: an archive whose chunk is a link to /dev/zero, whose other chunk is a FIFO and whose
manifest nests 100k deep gets a verdict naming each as an archive finding (no hang, no
MemoryError), and a report whose table is a link to /dev/zero is written with that table noted
as unreadable (run under a 4 GiB address-space limit: a regression fails, never takes the host)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from contracts import audit_tables as T
from tests.spark_jobs.test_audit_cli import ERIC, ship

REPORT_AS_LIMIT_BYTES = 4 << 30


def _haproof(*args: str, limit_as: int | None = None) -> subprocess.CompletedProcess:
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=cap if limit_as else None,
    )


def _hostile_archive(root: Path) -> dict[str, str]:
    """Three chunks made hostile; returns key -> the archive finding kind expected."""
    logs = sorted(root.rglob("*.log"))
    assert len(logs) >= 4, logs
    zero, fifo, deep = logs[0], logs[1], logs[2]
    zero.unlink()
    os.symlink("/dev/zero", zero)
    fifo.unlink()
    os.mkfifo(fifo)
    manifest = deep.with_suffix(".json")
    manifest.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)

    def key(p: Path) -> str:
        return str(p.relative_to(root))

    return {
        key(zero): (T.FAULT_SIZE_MISMATCH, T.FAULT_UNREADABLE),
        key(fifo): (T.FAULT_UNREADABLE,),
        key(manifest): (T.FAULT_BAD_JSON,),
    }


def test_hostile_objects_are_archive_findings_in_the_audit_and_the_report(
    tmp_path, golden_stores
) -> None:
    import pandas as pd

    root = tmp_path / "arch"
    ship(golden_stores / ERIC, f"file://{root}")
    expected = _hostile_archive(root)
    res = _haproof(
        "audit",
        "--root",
        f"file://{root}",
        "--cluster",
        "rmq",
        "--run-id",
        "r1",
        "--no-expectations",
    )
    assert res.returncode in (0, 1), res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    out = root / "audits" / "r1" / "broker-a"
    verdict = json.loads((root / "audits" / "r1" / "verdict.json").read_text())
    assert not verdict["passed"]
    faults = pd.read_parquet(out / "archive_faults.parquet")
    kinds = {}
    for row in faults.itertuples():
        kinds.setdefault(row.key, set()).add(row.kind)
    for key, allowed in expected.items():
        assert kinds.get(key, set()) & set(allowed), (key, kinds.get(key), allowed)

    table = out / "ranges.parquet"
    table.unlink()
    os.symlink("/dev/zero", table)
    res = _haproof(
        "report",
        "--root",
        f"file://{root}",
        "--run",
        "r1",
        "--json",
        limit_as=REPORT_AS_LIMIT_BYTES,
    )
    assert res.returncode == 0, res.stderr
    (report,) = json.loads(res.stdout)["reports"]
    assert any("ranges" in m and "not a regular file" in m for m in report["missing"]), report
