"""The GX suites over audit tables written as the audit writes them (Parquet in a file:// root)."""

from __future__ import annotations

import json

import pytest

from contracts import audit_tables as T
from contracts.object_store import open_store
from expectations import run_suites
from expectations.report import ExpectationsError
from expectations.suites import parameters
from expectations.validation import SuiteRunner
from spark_jobs.outputs import complete_range, table_bytes

RUN = "20261123T000000Z-test01"
GROUP = "broker-a"


def _put(
    store, table: str, rows: list[dict], columns: list[str] | None = None, group: str = GROUP
) -> None:
    """The table as the audit writes it (spark_jobs.outputs: exactly the contract's columns)."""
    if table == "ranges":
        rows = [dict(r) for r in rows]
        for r in rows:
            complete_range(r)
    store.put_mutable(f"audits/{RUN}/{group}/{table}.parquet", table_bytes(table, rows))


def _clean(store, group: str = GROUP, **override) -> None:
    tables = {
        "ranges": [
            {"pair": "a-0->a-1", "start": 0, "end": 4096, "verdict": "match", "detail": ""},
            {"pair": "a-0->a-1", "start": 4096, "end": 5000, "verdict": "lag", "detail": "tail"},
        ],
        "records_issues": [],
        "offset_timeline": [
            {
                "taken_at": 1,
                "node": "a-0",
                "role": "SYNC_MASTER",
                "epoch": 1,
                "group_name": "g",
                "topic": "T",
                "queue_id": 0,
                "committed": 5,
                "queue_max": 9,
            },
        ],
        "offset_violations": [],
        "archive_faults": [],
        "acked_losses": [],
        "checks": [
            {"check": c, "status": "pass", "findings": 0, "evidence": 3, "reason": ""}
            for c in T.CHECKS
        ],
    }
    tables.update(override)
    for name, rows in tables.items():
        _put(store, name, rows, group=group)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return open_store("file://" + str(tmp_path_factory.mktemp("gx")))


def _failed(report, table: str) -> list[str]:
    (suite,) = [s for s in report.suites if s.table == table]
    return [f["expectation"] for f in suite.failed]


def test_clean_tables_pass_and_publish_report(store):
    _clean(store)
    report = run_suites(store, RUN, GROUP)
    assert report.success, [s for s in report.suites if not s.success]
    assert {s.table for s in report.suites} == set(T.TABLES)
    assert all(s.evaluated > 0 for s in report.suites)
    html = store.get(report.report_key).decode()
    assert "<html" in html.lower()
    assert any(
        o.key.endswith(".html") and "/validations/" in o.key
        for o in store.list(f"audits/{RUN}/{GROUP}/report/")
    )
    summary = json.loads(store.get(report.summary_key))
    assert summary["success"] is True and summary["runId"] == RUN


def test_divergent_range_and_long_lag_fail(store):
    _clean(
        store,
        ranges=[
            {"pair": "a-0->a-1", "start": 0, "end": 100, "verdict": "match", "detail": ""},
            {
                "pair": "a-0->a-1",
                "start": 100,
                "end": 200,
                "verdict": "divergent",
                "detail": "first differing byte 137",
            },
            {"pair": "a-0->a-1", "start": 200, "end": 10_000, "verdict": "lag", "detail": ""},
        ],
    )
    report = run_suites(store, RUN, GROUP, {"max_lag_bytes": 1000})
    assert not report.success
    failed = _failed(report, "ranges")
    assert "expect_column_values_to_not_be_in_set" in failed
    assert "expect_column_values_to_be_between" in failed  # the 9,800-byte lag range
    (nis,) = [
        f
        for s in report.suites
        for f in s.failed
        if f["expectation"] == "expect_column_values_to_not_be_in_set"
    ]
    assert nis["found"]["unexpected_count"] == 1
    assert nis["found"]["partial_unexpected_list"] == ["divergent"]
    # The same lag is fine under the default 256 MiB threshold.
    _clean(store)
    assert run_suites(store, RUN, GROUP).success


def test_record_issue_and_offset_violation_fail(store):
    _clean(
        store,
        records_issues=[{"node": "a-1", "offset": 4242, "check": "crc", "detail": "body CRC"}],
        offset_violations=[
            {
                "kind": "regression",
                "group_name": "g",
                "topic": "T",
                "queue_id": 0,
                "before": 9,
                "after": 3,
                "node_before": "a-0",
                "node_after": "a-1",
                "epoch_before": 1,
                "epoch_after": 2,
                "at_before": 1,
                "at_after": 2,
                "failover": "",
                "reconsumed_messages": 6,
            }
        ],
    )
    report = run_suites(store, RUN, GROUP)
    assert not report.success
    assert _failed(report, "records_issues") == ["expect_table_row_count_to_be_between"]
    assert _failed(report, "offset_violations") == ["expect_table_row_count_to_be_between"]
    assert _failed(report, "ranges") == []


def test_negative_committed_offset_fails_timeline(store):
    row = {
        "taken_at": 1,
        "node": "a-0",
        "role": "SYNC_MASTER",
        "epoch": 1,
        "group_name": "g",
        "topic": "T",
        "queue_id": 0,
        "committed": -4,
        "queue_max": 9,
    }
    _clean(store, offset_timeline=[row])
    report = run_suites(store, RUN, GROUP)
    assert _failed(report, "offset_timeline") == ["expect_column_values_to_be_between"]


def test_missing_table_is_a_clear_error(tmp_path):
    store = open_store("file://" + str(tmp_path))
    _put(store, "ranges", [], ["pair", "start", "end", "verdict", "detail"])
    with pytest.raises(ExpectationsError, match=r"records_issues\.parquet is missing"):
        run_suites(store, RUN, GROUP)


def test_allowed_extra_passes_and_unexcused_extra_fails(store):
    tail = {"pair": "a-1->a-0", "start": 5000, "end": 5100, "verdict": "extra", "detail": ""}
    _clean(store, ranges=[{**tail, "allowed": True}])
    assert run_suites(store, RUN, GROUP).success
    _clean(store, ranges=[tail])
    report = run_suites(store, RUN, GROUP)
    assert not report.success
    assert _failed(report, "ranges") == ["expect_column_values_to_not_be_in_set"]


def test_archive_fault_and_acked_loss_fail(store):
    fault = {
        "node": "a-1",
        "key": "k.log",
        "kind": "log_missing",
        "start": 0,
        "end": 9,
        "detail": "absent",
    }
    loss = {
        "kind": "acknowledged_bytes_truncated",
        "slave": "a-0",
        "lost_start": 10,
        "lost_end": 20,
        "ack": 20,
        "verdict": "data_loss",
        "snapshot": "s",
    }
    _clean(store, archive_faults=[fault], acked_losses=[loss])
    report = run_suites(store, RUN, GROUP)
    assert _failed(report, "archive_faults") == ["expect_table_row_count_to_be_between"]
    assert _failed(report, "acked_losses") == ["expect_table_row_count_to_be_between"]


def test_no_evidence_fails_only_when_required(store):
    checks = [
        {"check": c, "status": "pass", "findings": 0, "evidence": 1, "reason": ""} for c in T.CHECKS
    ]
    checks[-1] = {**checks[-1], "status": "no_evidence", "evidence": 0}
    _clean(store, checks=checks)
    assert run_suites(store, RUN, GROUP, parameters(require_evidence=False)).success
    report = run_suites(store, RUN, GROUP, parameters(require_evidence=True))
    assert _failed(report, "checks") == ["expect_column_values_to_be_between"]


def test_one_runner_for_every_group_keeps_each_groups_verdict_and_site(tmp_path):
    """The run's GX context and suites are built once; each group still gets its own verdict
    and a site with its own validations only, as a fresh context gives."""
    store = open_store("file://" + str(tmp_path))
    issue = {"node": "a-1", "offset": 7, "check": "crc", "detail": "body CRC"}
    _clean(store, group="broker-a")
    _clean(store, group="broker-b", records_issues=[issue])
    runner = SuiteRunner()
    reports = {g: run_suites(store, RUN, g, runner=runner) for g in ("broker-a", "broker-b")}
    assert reports["broker-a"].success and not reports["broker-b"].success
    assert _failed(reports["broker-b"], "records_issues") == [
        "expect_table_row_count_to_be_between"
    ]
    for group in ("broker-a", "broker-b"):
        pages = [o.key for o in store.list(f"audits/{RUN}/{group}/report/validations/")]
        assert len([k for k in pages if k.endswith(".html")]) == len(T.TABLES), pages
    fresh = run_suites(store, RUN, "broker-b")  # a runner of its own: the same findings
    assert [(s.suite, s.success, s.failed) for s in fresh.suites] == [
        (s.suite, s.success, s.failed) for s in reports["broker-b"].suites
    ]
    assert set(runner.timings_s) >= {"import", "context", "suites", "validation", "docs"}
    assert all(s >= 0 for s in runner.timings_s.values())
