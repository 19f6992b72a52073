"""An audit table (Parquet) read within the documented limits (contracts/read_limits.py): its
metadata is looked at before any column is decoded, so a table that declares more rows or more
uncompressed bytes than a report or a suite takes is refused, never expanded into memory."""

from __future__ import annotations

import io

from contracts.read_limits import MAX_PARQUET_ROWS, MAX_PARQUET_UNCOMPRESSED_BYTES


def parquet_frame(data: bytes, key: str):
    """The table's pandas DataFrame; ValueError naming ``key`` when it breaks a limit."""
    import pandas as pd
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    if meta.num_rows > MAX_PARQUET_ROWS:
        raise ValueError(f"{key}: {meta.num_rows} rows, more than {MAX_PARQUET_ROWS}")
    declared = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if declared > MAX_PARQUET_UNCOMPRESSED_BYTES:
        raise ValueError(
            f"{key}: {declared} uncompressed bytes, more than {MAX_PARQUET_UNCOMPRESSED_BYTES}"
        )
    return pd.read_parquet(io.BytesIO(data))
