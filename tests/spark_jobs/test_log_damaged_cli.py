"""A real RocketMQ store pair (the golden store as master, a copy damaged mid-log as slave):
``haproof archive`` of the slave exits 1 and records ``log_damaged``; ``haproof audit`` fails it
on every path (the check, the GX suites, ``--json``'s first finding, the report page)."""

from __future__ import annotations

import json
import re
import subprocess

from tests.support.haproof_cli import ERIC, archive_argv, audit_json, writable_copy
from tests.support.haproof_cli import ship as ship_store

DAMAGED_AT = 16384 + 172 * 3  # the 4th record of the golden store's second file


def test_a_damaged_real_store_fails_the_audit_on_every_path(tmp_path, golden_stores) -> None:
    root = f"file://{tmp_path}/arch"
    ship_store(golden_stores / ERIC, root, node="broker-a-0", extra=("--role", "SYNC_MASTER"))
    slave = writable_copy(golden_stores / ERIC, tmp_path / "slave")
    f = slave / "commitlog" / "00000000000000016384"
    data = bytearray(f.read_bytes())
    data[172 * 3 + 4 : 172 * 3 + 8] = b"\x00\x00\x00\x07"  # a bad magic code
    f.write_bytes(bytes(data))
    argv = archive_argv(
        slave, root, "rmq", "broker-a", "broker-a-1", "--role", "SLAVE", "--broker-id", "1"
    )
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "recorded as v1/rmq/broker-a/broker-a-1/events/" in res.stderr

    doc = audit_json("--root", root, "--cluster", "rmq", "--run-id", "r1", rc=1)
    [group] = doc["groups"]
    checks = {c["name"]: c for c in group["checks"]}
    assert checks["log_integrity"]["status"] == "fail"
    assert checks["log_integrity"]["first"]["offset"] == DAMAGED_AT
    assert checks["log_integrity"]["first"]["node"] == "broker-a-1"
    assert checks["replica_consistency"]["status"] == "pass"  # the prefix matched; lag after
    assert group["expectations"]["success"] is False
    assert "records_issues" in " ".join(group["expectations"]["failedSuites"])
    verdict = json.loads((tmp_path / "arch" / "audits" / "r1" / "verdict.json").read_text())
    [issue] = verdict["findings"]["records_issues"]
    assert (issue["node"], issue["offset"], issue["check"]) == (
        "broker-a-1",
        DAMAGED_AT,
        "log_damaged",
    )
    page = (tmp_path / "arch" / "audits" / "r1" / "broker-a" / "report.html").read_text()
    assert re.search(rf"log_damaged on broker-a-1 at offset {DAMAGED_AT}", page)
