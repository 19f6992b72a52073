"""The judge that compares an audit's outputs with a case's truth, on hand-written outputs
(no Spark): right outputs give no mismatch; each wrong one is named."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from contracts import audit_tables as at
from contracts.object_store import open_store
from tests.faults.generator import Between, Case, OneOf, Witness, truth
from tests.faults.judge import judge

RUN, GROUP = "r1", "f02-log-missing"
KEY = "v1/c1/f02-log-missing/a-1/commitlog/00000000000000000134-00000000000000000268-0.log"


def case() -> Case:
    return Case(
        "log-missing",
        GROUP,
        truth(
            **{
                at.ARCHIVE_INTEGRITY: at.STATUS_FAIL,
                at.REPLICA_CONSISTENCY: at.STATUS_FAIL,
                at.ACKNOWLEDGED_DURABILITY: None,
            }
        ),
        witnesses=[
            Witness(
                "archive_faults",
                {
                    "node": "a-1",
                    "key": KEY,
                    "kind": at.FAULT_LOG_MISSING,
                    "start": 134,
                    "end": OneOf((268, 269)),
                },
            ),
            Witness(
                "ranges",
                {"pair": "a-0->a-1", "start": Between(100, 134), "end": 268, "verdict": at.MISSING},
            ),
        ],
        forbid=[Witness("records_issues", {"node": "a-1"})],
    )


def rows() -> dict[str, list[dict]]:
    return {
        "archive_faults": [
            {
                "node": "a-1",
                "key": KEY,
                "kind": "log_missing",
                "start": 134.0,
                "end": 268.0,
                "detail": "gone",
            }
        ],
        "ranges": [
            {
                "pair": "a-0->a-1",
                "master": "a-0",
                "node": "a-1",
                "start": 0,
                "end": 134,
                "bytes": 134,
                "verdict": "match",
                "allowed": False,
                "lag_exceeded": False,
                "first_diff": None,
                "detail": "",
            },
            {
                "pair": "a-0->a-1",
                "master": "a-0",
                "node": "a-1",
                "start": 134,
                "end": 268,
                "bytes": 134,
                "verdict": "missing",
                "allowed": False,
                "lag_exceeded": False,
                "first_diff": None,
                "detail": KEY,
            },
        ],
        "checks": [
            {"check": c, "status": s or at.STATUS_FAIL, "findings": 1, "evidence": 9, "reason": ""}
            for c, s in case().expect.items()
        ],
    }


def write(store, tables: dict[str, list[dict]], statuses: dict[str, str], **verdict) -> None:
    prefix = f"audits/{RUN}/{GROUP}/"
    for table, columns in at.TABLE_COLUMNS.items():
        df = pd.DataFrame(tables.get(table, []), columns=list(columns))
        df = df.astype({c: t for c, t in columns.items() if tables.get(table) or t != "object"})
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        store.put_mutable(prefix + f"{table}.parquet", buf.getvalue())
    doc = {
        "status": at.RUN_FAILED,
        "passed": False,
        "checks": [
            {"name": c, "status": s, "findings": 1, "evidence": 1, "detail": "why"}
            for c, s in statuses.items()
        ],
        "findings": {
            k: []
            for k in (
                "ranges",
                "records_issues",
                "acknowledged_durability",
                "offset_violations",
                "archive_faults",
            )
        },
    }
    doc.update(verdict)
    store.put_mutable(prefix + "verdict.json", json.dumps(doc).encode())


@pytest.fixture
def store(tmp_path):
    return open_store(f"file://{tmp_path}")


def statuses() -> dict[str, str]:
    return {c: s or at.STATUS_FAIL for c, s in case().expect.items()}


def test_outputs_that_follow_the_truth_have_no_mismatch(store) -> None:
    write(store, rows(), statuses())
    assert judge(store, RUN, case()) == []


def test_a_false_pass_a_wrong_witness_and_a_false_finding_are_each_named(store) -> None:
    tables = rows()
    tables["ranges"][1]["start"] = 140  # not the chunk's range
    tables["records_issues"] = [{"node": "a-1", "offset": 134, "check": "crc_mismatch"}]
    wrong = {**statuses(), at.REPLICA_CONSISTENCY: at.STATUS_PASS}
    write(store, tables, wrong, status=at.RUN_PASSED, passed=True)
    problems = judge(store, RUN, case())
    assert any("run status PASSED, truth FAILED" in p for p in problems)
    assert any("passed=True, truth False" in p for p in problems)
    assert any("check replica_consistency is pass" in p for p in problems)
    assert any("no witness ranges" in p for p in problems)
    assert any("false finding" in p for p in problems)
    assert any("checks table says" in p for p in problems)  # the table disagrees with the json
    assert not any("archive_faults" in p for p in problems)
    assert all(p.startswith(GROUP) for p in problems)


def test_missing_outputs_and_columns_are_named(store) -> None:
    assert judge(store, RUN, case()) == [f"{case().describe()}: no verdict.json"]
    write(store, rows(), statuses())
    store.delete(f"audits/{RUN}/{GROUP}/acked_losses.parquet")
    df = pd.DataFrame([{"node": "a-1", "offset": 1, "check": "x", "detail": ""}])
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    store.put_mutable(f"audits/{RUN}/{GROUP}/records_issues.parquet", buf.getvalue())
    problems = judge(store, RUN, case())
    assert any("no acked_losses table" in p for p in problems)
    assert any("records_issues columns: extra [], lacking ['expected'" in p for p in problems)
