"""The Great Expectations suites over one audit run's tables (DESIGN.md section 4).

One ``build_*`` per table of ``contracts.audit_tables.TABLE_COLUMNS``; every threshold and every
verdict list is a ``$PARAMETER`` whose default comes from ``contracts.audit_tables``, the one
owner of what fails a check: the suites never restate a rule, they apply the contract's
constants to the published tables, as an independent second reading of the audit's outputs
(the Spark jobs decide the verdict; GX checks the tables say the same and renders Data Docs).
"""

from __future__ import annotations

from typing import Any

from contracts import audit_tables as T

#: the suites' parameters: what the contract says, overridable per run (never looser than the
#: audit's own settings when the CLI or a DAG passes them: max_lag_bytes, require_evidence)
DEFAULT_PARAMETERS: dict[str, Any] = {
    "range_verdicts": list(T.RANGE_VERDICTS),
    # failing verdicts no row can be excused from, and those an ``allowed`` row is excused from
    "unexcusable_verdicts": [
        v for v in T.FAILING_RANGE_VERDICTS if v not in T.EXCUSABLE_RANGE_VERDICTS
    ],
    "excusable_verdicts": list(T.EXCUSABLE_RANGE_VERDICTS),
    "max_lag_bytes": T.DEFAULT_MAX_LAG_BYTES,
    "max_record_issues": 0,
    "max_archive_faults": 0,
    "max_acked_losses": 0,
    "max_offset_violations": 0,
    # 1 with --require-evidence: every check must have judged something
    "min_evidence": 0,
    "roles": ["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"],
}

TABLE_COLUMNS = T.TABLE_COLUMNS


def parameters(max_lag_bytes: int | None = None, require_evidence: bool = False) -> dict:
    """The suites' parameters for a run judged with these audit settings."""
    out = dict(DEFAULT_PARAMETERS)
    if max_lag_bytes is not None:
        out["max_lag_bytes"] = max_lag_bytes
    out["min_evidence"] = 1 if require_evidence else 0
    return out


def _param(name: str) -> dict[str, str]:
    return {"$PARAMETER": name}


def _columns(gxe, table: str):
    return gxe.ExpectTableColumnsToMatchSet(column_set=list(TABLE_COLUMNS[table]), exact_match=True)


def build_ranges(gx, gxe):
    from great_expectations.expectations.row_conditions import Column

    suite = gx.ExpectationSuite(name="haproof_ranges")
    suite.add_expectation(_columns(gxe, "ranges"))
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeInSet(column="verdict", value_set=_param("range_verdicts"))
    )
    suite.add_expectation(
        gxe.ExpectColumnValuesToNotBeInSet(
            column="verdict", value_set=_param("unexcusable_verdicts")
        )
    )
    suite.add_expectation(
        gxe.ExpectColumnValuesToNotBeInSet(
            column="verdict",
            value_set=_param("excusable_verdicts"),
            row_condition=Column("allowed") == False,  # noqa: E712 (a GX condition, not a test)
        )
    )
    suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column="pair"))
    suite.add_expectation(
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="end", column_B="start")
    )
    # A lag range is the slave's unreplicated tail; longer than the allowed lag fails.
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeBetween(
            column="bytes",
            min_value=0,
            max_value=_param("max_lag_bytes"),
            row_condition=Column("verdict") == T.LAG,
        )
    )
    return suite


def _no_rows(gx, gxe, table: str, param: str):
    suite = gx.ExpectationSuite(name=f"haproof_{table}")
    suite.add_expectation(_columns(gxe, table))
    suite.add_expectation(gxe.ExpectTableRowCountToBeBetween(min_value=0, max_value=_param(param)))
    return suite


def build_records_issues(gx, gxe):
    return _no_rows(gx, gxe, "records_issues", "max_record_issues")


def build_archive_faults(gx, gxe):
    return _no_rows(gx, gxe, "archive_faults", "max_archive_faults")


def build_acked_losses(gx, gxe):
    return _no_rows(gx, gxe, "acked_losses", "max_acked_losses")


def build_offset_violations(gx, gxe):
    return _no_rows(gx, gxe, "offset_violations", "max_offset_violations")


def build_offset_timeline(gx, gxe):
    suite = gx.ExpectationSuite(name="haproof_offset_timeline")
    suite.add_expectation(_columns(gxe, "offset_timeline"))
    for col in ("taken_at", "node", "group_name", "topic", "queue_id", "committed"):
        suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=col))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="committed", min_value=0))
    suite.add_expectation(gxe.ExpectColumnValuesToBeInSet(column="role", value_set=_param("roles")))
    return suite


def build_checks(gx, gxe):
    suite = gx.ExpectationSuite(name="haproof_checks")
    suite.add_expectation(_columns(gxe, "checks"))
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeInSet(
            column="check", value_set=list(T.CHECKS + T.INFORMATIONAL_CHECKS)
        )
    )
    # with --require-evidence, every check must have judged something (no_evidence fails)
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeBetween(column="evidence", min_value=_param("min_evidence"))
    )
    return suite


BUILDERS = {
    "ranges": build_ranges,
    "records_issues": build_records_issues,
    "archive_faults": build_archive_faults,
    "acked_losses": build_acked_losses,
    "offset_timeline": build_offset_timeline,
    "offset_violations": build_offset_violations,
    "checks": build_checks,
}


def prepare_frame(table: str, df):
    """The table as the suites expect it: an empty table from the audit may carry no columns, so
    the declared ones are added (a non-empty table missing one fails its column-set
    expectation)."""
    import pandas as pd

    if len(df) == 0:
        for col, dtype in TABLE_COLUMNS[table].items():
            if col not in df.columns:
                df[col] = pd.Series([], dtype=dtype)
    return df
