"""The offset timeline travels as an Arrow table (a year of snapshots is millions of rows): its
Parquet reads back as the dict rows' does, and the rows the next run's state keeps are those
``next_state`` would pick from the whole timeline."""

from __future__ import annotations

import io

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.archive_layout import Snapshot
from spark_jobs import incremental as inc
from spark_jobs.offset_monotonicity import (
    TIMELINE_COLUMNS,
    master_points,
    timeline_last_rows,
    timeline_rows,
    timeline_table,
)
from spark_jobs.outputs import table_bytes


def _snap(node: str, role: str, at: int, offsets: dict, qmax: dict | None = None) -> Snapshot:
    return Snapshot(
        node=node,
        brokerName="b",
        brokerId=0 if role != "SLAVE" else 1,
        role=role,
        epoch=1,
        takenAt=at,
        maxPhyOffset=0,
        flushedOffset=0,
        confirmOffset=0,
        consumerOffsets={"T@g": {str(q): o for q, o in offsets.items()}},
        queueMaxOffsets={"T": {str(q): o for q, o in (qmax or {}).items()}},
    )


snaps = st.lists(
    st.builds(
        _snap,
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["SYNC_MASTER", "SLAVE", "ASYNC_MASTER"]),
        st.integers(0, 20),
        st.dictionaries(st.integers(0, 3), st.integers(0, 100), max_size=4),
        st.none() | st.dictionaries(st.integers(0, 3), st.integers(0, 100), max_size=4),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(snaps)
def test_arrow_timeline_parquet_reads_back_as_the_dict_rows(snapshots) -> None:
    rows = [dict(zip(TIMELINE_COLUMNS, r, strict=True)) for r in timeline_rows(snapshots)]
    table = timeline_table(snapshots)
    a = pd.read_parquet(io.BytesIO(table_bytes("offset_timeline", rows)))
    b = pd.read_parquet(io.BytesIO(table_bytes("offset_timeline", table)))
    pd.testing.assert_frame_equal(a, b, check_dtype=True)
    assert master_points(table) == sum(1 for r in rows if r["role"] != "SLAVE")


@settings(max_examples=60, deadline=None)
@given(snaps)
def test_the_kept_rows_give_the_state_the_whole_timeline_gives(snapshots) -> None:
    rows = [dict(zip(TIMELINE_COLUMNS, r, strict=True)) for r in timeline_rows(snapshots)]
    table = timeline_table(snapshots)
    whole = inc.next_state(inc.AuditState(), "r", {}, rows, [], None)
    kept = inc.next_state(inc.AuditState(), "r", {}, timeline_last_rows(table), [], None)
    assert kept.offsets == whole.offsets and kept.node_points == whole.node_points
