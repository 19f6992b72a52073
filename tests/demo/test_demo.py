"""``haproof demo`` end to end, as a user runs it: real processes, embedded S3, Airflow, Spark."""

from __future__ import annotations

import re
import subprocess
import sys


def demo(workdir, *extra: str, timeout_s: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "demo", "--workdir", str(workdir), *extra],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_demo_runs_the_main_job_and_passes(tmp_path):
    workdir = tmp_path / "demo"
    workdir.mkdir()
    (workdir / ".haproof-demo").write_text("an earlier run\n")
    (workdir / "left-over.log").write_text("from an earlier run\n")
    res = demo(workdir, "--messages", "300")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert res.stdout.rstrip().endswith("PASSED")
    assert not (workdir / "left-over.log").exists()  # the earlier demo's directory was replaced
    assert (workdir / ".haproof-demo").is_file()
    for check in (
        "replica_consistency",
        "acknowledged_durability",
        "log_integrity",
        "offset_monotonicity",
    ):
        assert f"PASS  {check}" in out
    # 300 before the failover, 150 after: a SYNC_MASTER with its slave acknowledges every one.
    assert "acknowledged sends: 450" in out
    # controller mode: the controller elected broker-a-0 first, and broker-a-1 after the kill -9
    # with no manual step; the commit made right before the kill is still answered
    assert "the controller elected broker-a-0: master of broker-a under epoch 1" in out
    assert re.search(r"the controller elected broker-a-1 in [\d.]+ s \(no manual step\)", out)
    assert "broker-a-1 is master of broker-a under epoch 2" in out
    assert "admin promote" not in out
    survived = re.search(
        r"broker-a-1 answers QUERY_CONSUMER_OFFSET with the commit made just before the kill: "
        r"committed (\d+), answered (\d+)",
        out,
    )
    assert survived and int(survived.group(2)) >= int(survived.group(1)) > 0, out[-3000:]
    # the commit reached the slave and an archived master snapshot before the kill -9, and the
    # group committed again on the new master: the audit judged offsets on both epochs
    assert "broker-a-1 holds the committed offsets" in out
    assert re.search(r"broker-a-0 \(epoch 1\): \d{13}\.json carries the committed offsets", out)
    assert re.search(r"broker-a-1 \(epoch 2\): \d{13}\.json carries the committed offsets", out)
    judged = re.search(
        r"offsets judged: 1 consumer group\(s\), (\d+) queue\(s\), (\d+) point\(s\); "
        r"master points on epoch\(s\) 1, 2\n",
        out,
    )
    assert judged, out[-3000:]
    assert int(judged.group(1)) >= 1 and int(judged.group(2)) >= 2 * int(judged.group(1))
    # every commit is a record in the log: nothing unobserved; delivery counted from the archive
    assert "offsets.blindWindowMs: 0 (" in out
    assert "delivery: enqueued 450, duplicated 0, redelivered 0, lost 0" in out
    assert "election: broker-a-1 master under epoch 2 (from the SyncStateSet)" in out
    reports = list(workdir.glob("report/*/report/index.html"))
    assert len(reports) == 1 and "haproof_ranges" in reports[0].read_text()
    assert (workdir / "report" / "dag_report.json").is_file()


def test_demo_refuses_to_delete_a_directory_it_did_not_make(tmp_path):
    workdir = tmp_path / "mine"
    workdir.mkdir()
    (workdir / "thesis.tex").write_text("precious\n")
    res = demo(workdir, timeout_s=120)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to delete it" in lines[0] and str(workdir) in lines[0]
    assert (workdir / "thesis.tex").read_text() == "precious\n"
    assert sorted(p.name for p in workdir.iterdir()) == ["thesis.tex"]
    assert "step" not in res.stdout  # nothing started
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    res = demo(a_file, timeout_s=120)
    assert res.returncode == 2 and "is not a directory" in res.stderr, res.stderr
    assert a_file.read_text() == "mine\n"


def test_demo_takes_an_empty_directory_it_did_not_make_and_marks_it(tmp_path, monkeypatch):
    """An existing empty directory holds nothing to lose: the demo takes it and marks it."""
    from tools.demo import base, cluster

    class Stop(Exception):
        pass

    def no_s3():  # stop right after the workdir step: no server needed to see the marker
        raise Stop

    monkeypatch.setattr(cluster.S3Server, "start", staticmethod(no_s3))
    workdir = tmp_path / "empty"
    workdir.mkdir()
    d = base.Demo(type("Args", (), {"workdir": str(workdir), "messages": 1})())
    try:
        cluster.prepare(d)
    except Stop:
        pass
    assert sorted(p.name for p in workdir.iterdir()) == [base.MARKER]
