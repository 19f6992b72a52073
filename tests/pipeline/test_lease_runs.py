"""Two real ``haproof audit`` processes of one group at once (Spark local mode, file://): the
second either exits 3 naming the run that holds the group's lease, or waits for it; the runs'
writes never overlap."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from contracts.audit_state import audit_lease_key
from tests.conftest import wait_until
from tests.support.haproof_cli import ERIC, audit, ship, start_audit

#: an incremental audit of broker-a
OF_THE_GROUP = ("--cluster", "rmq", "--broker-name", "broker-a", "--incremental")


def _audit(root: str, **env: str) -> subprocess.Popen:
    return start_audit("--root", root, *OF_THE_GROUP, "--no-expectations", env=env)


def _files_of_run(root: Path, run_id: str) -> list[Path]:
    return [p for p in (root / "audits" / run_id).rglob("*") if p.is_file()]


def test_two_audits_of_one_group_never_run_at_once(tmp_path, golden_stores):
    root = tmp_path / "a"
    ship(golden_stores / ERIC, f"file://{root}")
    lease_path = root / audit_lease_key("rmq", "broker-a")

    def held() -> dict | None:
        try:
            doc = json.loads(lease_path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return None if doc["released"] else doc

    # B gives up at once (the default), naming the run that holds the group: held here, by
    # the lease a run takes (a real run may finish before B's start-up reaches its check)
    from contracts.object_store import open_store as _open
    from spark_jobs.lease import GroupLeases

    holder = "a-run-holding-the-group"
    with GroupLeases(_open(f"file://{root}"), "rmq", ["broker-a"], holder, ttl_s=60):
        assert held()["holder"] == holder
        b, _ = audit("--root", f"file://{root}", *OF_THE_GROUP)
    assert b.returncode == 3, b.stderr[-3000:]
    assert f"another audit holds this group: run {holder}" in b.stderr
    assert "Traceback" not in b.stderr
    # A and C: C waits for A's lease
    a = _audit(f"file://{root}")
    try:
        lease_a = wait_until(held, timeout_s=120, what="run A's lease")
        c = _audit(f"file://{root}", HAPROOF_AUDIT_LEASE_WAIT_S="600")
        out_a, err_a = a.communicate(timeout=600)
        out_c, err_c = c.communicate(timeout=600)
    finally:
        for p in (a, locals().get("c")):
            if p is not None and p.poll() is None:
                p.kill()
    assert a.returncode == 0 and c.returncode == 0, err_a[-3000:] + err_c[-3000:]
    runs = sorted(p.name for p in (root / "audits").iterdir() if not p.name.startswith("_"))
    assert len(runs) == 2 and lease_a["holder"] in runs  # B wrote nothing
    (run_c,) = set(runs) - {lease_a["holder"]}
    lease_c = json.loads(lease_path.read_text())
    assert lease_c["holder"] == run_c and lease_c["released"] is True
    # every output of A was written before C took the lease, every one of C's after
    last_a = max(p.stat().st_mtime for p in _files_of_run(root, lease_a["holder"]))
    first_c = min(p.stat().st_mtime for p in _files_of_run(root, run_c))
    assert last_a * 1000 <= lease_c["acquiredAt"] <= first_c * 1000
    state = json.loads((root / "v1/rmq/broker-a/_audit/state.json").read_text())
    assert state["runId"] in (lease_a["holder"], run_c)
    # the verification lag continuous verification publishes: the newest verified upload
    from contracts.object_store import open_store
    from pipeline.verification import verification_lags

    (lag,) = verification_lags(open_store(f"file://{root}"), "rmq")
    assert lag["group"] == "broker-a" and lag["runId"] == state["runId"]
    assert 0 <= lag["lagMs"] < 900_000 and lag["newestVerifiedUploadMs"] > 0
    # both runs are in the history, newest first; B left nothing there either
    res, _ = audit(
        "history", "--root", f"file://{root}", "--cluster", "rmq", "--json", timeout_s=120
    )
    assert res.returncode == 0, res.stderr
    assert [r["runId"] for r in json.loads(res.stdout)["runs"]] == [run_c, lease_a["holder"]]
