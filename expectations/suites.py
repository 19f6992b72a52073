"""The Great Expectations suites over one audit run's tables (DESIGN.md section 4).

One ``build_*`` per table; every threshold is a ``$PARAMETER`` so a DAG run or a user can tighten
or relax it without editing a suite (``DEFAULT_PARAMETERS`` holds the values the audit itself
judges by). The suites are a second, independent reading of the audit's Parquet outputs: the
Spark jobs decide the verdict; GX checks the published tables say the same and renders the
data-quality report engineers read in their reviews.

Tables (columns as the audit writes them):

- ``ranges``: pair, start, end, verdict, detail — replica consistency per byte range
- ``records_issues``: node, offset, check, detail — log integrity findings
- ``offset_timeline``: taken_at, node, role, epoch, group_name, topic, queue_id, committed,
  queue_max — committed offsets seen in snapshots
- ``offset_violations``: one row per offset regression or offset beyond the queue's max
"""

from __future__ import annotations

from typing import Any

# Range verdicts (DESIGN.md section 4) and the ones that fail the audit.
RANGE_VERDICTS = ["match", "lag", "divergent", "missing", "extra", "unverifiable", "expired"]
DEFAULT_PARAMETERS: dict[str, Any] = {
    "range_verdicts": RANGE_VERDICTS,
    "failing_verdicts": ["divergent", "missing", "extra"],
    "max_lag_bytes": 256 * 1024 * 1024,  # RocketMQ's haSlaveFallbehindMax, as --max-lag-bytes
    "max_record_issues": 0,
    "max_offset_violations": 0,
}

# Columns each table must have, with the pandas dtype used when a table is empty.
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "ranges": {
        "pair": "object",
        "start": "int64",
        "end": "int64",
        "verdict": "object",
        "detail": "object",
    },
    "records_issues": {"node": "object", "offset": "int64", "check": "object", "detail": "object"},
    "offset_timeline": {
        "taken_at": "int64",
        "node": "object",
        "role": "object",
        "epoch": "int64",
        "group_name": "object",
        "topic": "object",
        "queue_id": "int64",
        "committed": "int64",
        "queue_max": "float64",  # null when the snapshot has no max for the queue
    },
    "offset_violations": {},
}


def _param(name: str) -> dict[str, str]:
    return {"$PARAMETER": name}


def build_ranges(gx, gxe):
    from great_expectations.expectations.row_conditions import Column

    suite = gx.ExpectationSuite(name="haproof_ranges")
    cols = list(TABLE_COLUMNS["ranges"])
    suite.add_expectation(gxe.ExpectTableColumnsToMatchSet(column_set=cols, exact_match=False))
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeInSet(column="verdict", value_set=_param("range_verdicts"))
    )
    suite.add_expectation(
        gxe.ExpectColumnValuesToNotBeInSet(column="verdict", value_set=_param("failing_verdicts"))
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
            row_condition=Column("verdict") == "lag",
        )
    )
    return suite


def build_records_issues(gx, gxe):
    suite = gx.ExpectationSuite(name="haproof_records_issues")
    suite.add_expectation(
        gxe.ExpectTableRowCountToBeBetween(min_value=0, max_value=_param("max_record_issues"))
    )
    return suite


def build_offset_timeline(gx, gxe):
    suite = gx.ExpectationSuite(name="haproof_offset_timeline")
    suite.add_expectation(
        gxe.ExpectTableColumnsToMatchSet(
            column_set=list(TABLE_COLUMNS["offset_timeline"]), exact_match=False
        )
    )
    for col in ("taken_at", "node", "group_name", "topic", "queue_id", "committed"):
        suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=col))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="committed", min_value=0))
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeInSet(
            column="role", value_set=["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"]
        )
    )
    return suite


def build_offset_violations(gx, gxe):
    suite = gx.ExpectationSuite(name="haproof_offset_violations")
    suite.add_expectation(
        gxe.ExpectTableRowCountToBeBetween(min_value=0, max_value=_param("max_offset_violations"))
    )
    return suite


BUILDERS = {
    "ranges": build_ranges,
    "records_issues": build_records_issues,
    "offset_timeline": build_offset_timeline,
    "offset_violations": build_offset_violations,
}


def prepare_frame(table: str, df):
    """The table as the suites expect it: an empty table from the audit may carry no columns, so
    the declared ones are added (a non-empty table missing one fails its column-set expectation);
    derived columns the expectations use are computed (``bytes`` of a range)."""
    import pandas as pd

    if len(df) == 0:
        for col, dtype in TABLE_COLUMNS[table].items():
            if col not in df.columns:
                df[col] = pd.Series([], dtype=dtype)
    if table == "ranges" and {"start", "end"} <= set(df.columns):
        df["bytes"] = (df["end"] - df["start"]).astype("int64")
    return df
