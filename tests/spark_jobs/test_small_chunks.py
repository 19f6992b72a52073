"""Many small chunks are checked by a few Spark tasks (one per task slot), not one task each."""

from __future__ import annotations

from spark_jobs.archive_reader import load_group
from spark_jobs.log_integrity import judge, run_log_integrity
from tests.spark_jobs.builder import Archive, make_store


def test_small_chunks_share_tasks(spark, tmp_path) -> None:
    path = tmp_path / "m"
    make_store(path, 60)
    archive = Archive(tmp_path / "archive")
    archive.ship(path, "a-0", "SYNC_MASTER", 0, chunk=400)  # a record or two per chunk
    chunks = load_group(archive.store, "c1", "broker-a").nodes["a-0"].chunks
    assert len(chunks) >= 30
    sc = spark.sparkContext
    sc.setJobGroup("small-chunks", "log integrity over small chunks")
    try:
        rows = run_log_integrity(spark, archive.spec, chunks)
    finally:
        sc.setJobGroup("", "")
    tracker = sc.statusTracker()
    stages = [
        s
        for j in tracker.getJobIdsForGroup("small-chunks")
        for s in (tracker.getJobInfo(j).stageIds if tracker.getJobInfo(j) else [])
    ]
    tasks = [tracker.getStageInfo(s).numTasks for s in stages if tracker.getStageInfo(s)]
    assert tasks and max(tasks) <= sc.defaultParallelism < len(chunks)
    result = judge(rows, chunks)
    assert result.records == sum(c["records"] for c in chunks) >= 60 and result.issues == []


def test_a_whole_audit_of_many_small_chunks_runs_few_tasks(spark, tmp_path) -> None:
    """Replica consistency too (where aligned chunks are checked): a master and a slave of a
    record or two per chunk, audited end to end, never get one Spark task per chunk."""
    from spark_jobs.audit import AuditOptions, run_audit

    path = tmp_path / "m"
    make_store(path, 60)
    archive = Archive(tmp_path / "archive")
    archive.ship(path, "a-0", "SYNC_MASTER", 0, chunk=400)
    archive.ship(path, "a-1", "SLAVE", 1, chunk=400)
    n_chunks = len(load_group(archive.store, "c1", "broker-a").nodes["a-1"].chunks)
    sc = spark.sparkContext
    sc.setJobGroup("small-audit", "a whole audit over small chunks")
    try:
        v = run_audit(spark, AuditOptions(spec=archive.spec, cluster="c1"))
    finally:
        sc.setJobGroup("", "")
    assert v["passed"]
    tracker = sc.statusTracker()
    jobs = tracker.getJobIdsForGroup("small-audit")
    stages = [
        s for j in jobs for s in (tracker.getJobInfo(j).stageIds if tracker.getJobInfo(j) else [])
    ]
    tasks = [tracker.getStageInfo(s).numTasks for s in stages if tracker.getStageInfo(s)]
    # the delivery check (issue #29) counts the messages the chunk tasks kept (no chunk read
    # twice): one small job over them
    assert tasks and sum(tasks) <= 4 * sc.defaultParallelism < n_chunks, tasks
