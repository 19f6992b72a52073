"""What a report is built from: one group's audit outputs, read tolerantly.

Every table of ``contracts.audit_tables.TABLE_COLUMNS`` is read from
``audits/{runId}/{brokerName}/{table}.parquet`` into plain row dicts (NaN becomes ``None``).
A table that is absent, unreadable or lacks columns is recorded in ``RunEvidence.missing`` (one
line naming the object and what is wrong) and its section renders from what is there; nothing
here raises for bad outputs. Only an invalid run id or group name (a key we refuse to build)
raises :class:`ReportInputError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from contracts import archive_layout as layout
from contracts import audit_tables as at
from contracts.errors import AuditInputError, ObjectNotFoundError
from contracts.read_limits import MAX_JSON_DOC_BYTES, MAX_PARQUET_BYTES, load_json_doc
from expectations.parquet_limits import parquet_frame

VERDICT_NAME = "verdict.json"
EXPECTATIONS_NAME = "expectations.json"
DATA_DOCS_INDEX = "report/index.html"
#: the most rows kept per table: a report lists at most 50 witnesses per check and plots are
#: downsampled, so a table beyond this is summarised from its counts (see ``truncated``)
MAX_ROWS = 200_000
#: an offset_timeline longer than this is thinned for the plots (see thin_timeline)
THIN_ABOVE = 20_000


class ReportInputError(AuditInputError):
    """The run or group named cannot be reported on (invalid name, nothing written for it)."""


@dataclass
class Table:
    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    present: bool = False
    columns: tuple[str, ...] = ()
    missing_columns: tuple[str, ...] = ()
    total_rows: int = 0  # before MAX_ROWS or thinning
    thinned: bool = False  # offset_timeline reduced for plotting (see thin_timeline)
    verdict_counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # ranges: n, bytes

    def has(self, *cols: str) -> bool:
        return self.present and all(c in self.columns for c in cols)


@dataclass
class RunEvidence:
    run_id: str
    broker_name: str
    prefix: str  # audits/{runId}/{brokerName}/
    verdict: dict[str, Any] | None
    tables: dict[str, Table]
    missing: list[str] = field(default_factory=list)  # one line per missing or partial output
    expectations: dict[str, Any] | None = None
    has_data_docs: bool = False
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    archive_notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def empty(self) -> bool:
        """Nothing at all was written for this run and group."""
        return self.verdict is None and not any(t.present for t in self.tables.values())

    @property
    def cluster(self) -> str | None:
        return (self.verdict or {}).get("cluster")


def group_prefix(run_id: str, broker_name: str) -> str:
    try:
        return f"{layout.audit_run_prefix(run_id)}{layout.check_name('brokerName', broker_name)}/"
    except layout.LayoutError as exc:
        raise ReportInputError(str(exc)) from exc


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return _clean(value.item())  # numpy scalar
    return value


def coerce_rows(name: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Numeric columns of the contract hold a finite int or float, else ``None``: whatever a
    writer put there, the page computes only with numbers (text columns are escaped as shown)."""
    numeric = [c for c, t in at.TABLE_COLUMNS.get(name, {}).items() if t in ("int64", "float64")]
    for row in rows:
        for c in numeric:
            v = row.get(c)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                row[c] = None
            elif isinstance(v, float) and not math.isfinite(v):
                row[c] = None
    return rows


def make_table(name: str, rows: list[dict[str, Any]], columns=None, total_rows=None) -> Table:
    """A present table from row dicts (coerced, see :func:`coerce_rows`)."""
    cols = tuple(columns if columns is not None else at.TABLE_COLUMNS.get(name, {}))
    missing = tuple(c for c in at.TABLE_COLUMNS.get(name, {}) if c not in cols)
    total = len(rows) if total_rows is None else total_rows
    return Table(name, coerce_rows(name, rows), True, cols, missing, total)


def read_table(store, prefix: str, name: str) -> tuple[Table, str | None]:
    """One table and, when it is absent or partial, the line saying so."""

    key = f"{prefix}{name}.parquet"
    table = Table(name)
    try:
        data = store.get(key, MAX_PARQUET_BYTES)
    except ObjectNotFoundError:
        return table, f"table {name}: {key} is missing"
    except Exception as exc:  # an unreadable object is a note on the page, never a crash
        return table, f"table {name}: {key} could not be read ({type(exc).__name__}: {exc})"
    try:
        df = parquet_frame(data, key)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        return table, f"table {name}: {key} is not readable Parquet ({exc})"
    expected = tuple(at.TABLE_COLUMNS.get(name, {}))
    table.present = True
    table.columns = tuple(str(c) for c in df.columns)
    table.missing_columns = tuple(c for c in expected if c not in table.columns)
    table.total_rows = len(df)
    if name == "ranges":
        table.verdict_counts = range_counts(df)
    if (
        name == "offset_timeline"
        and len(df) > min(THIN_ABOVE, MAX_ROWS)
        and not table.missing_columns
    ):
        df, table.thinned = thin_timeline(df), True
    head = df if table.thinned else df.head(MAX_ROWS)
    table.rows = coerce_rows(
        name, [{str(k): _clean(v) for k, v in row.items()} for row in head.to_dict("records")]
    )
    if table.missing_columns:
        return table, f"table {name}: {key} lacks column(s) {', '.join(table.missing_columns)}"
    return table, None


def range_counts(df) -> dict[str, tuple[int, int]]:
    """{verdict: (ranges, bytes)} over the whole table (before any row bound)."""
    if "verdict" not in df.columns:
        return {}
    if "bytes" in df.columns:
        size = df["bytes"]
    elif "start" in df.columns and "end" in df.columns:
        size = df["end"] - df["start"]
    else:
        size = df["verdict"].map(lambda _: 0)
    g = size.groupby(df["verdict"].astype(str))
    return {
        str(v): (int(n), int(b))
        for v, n, b in zip(g.count().index, g.count(), g.sum(), strict=True)
    }


def thin_timeline(df, bins: int = 1000):
    """Per (group, topic, queue, master or slave) and time bin: the rows with the lowest and
    the highest committed offset, plus every row where the node or epoch changes. A plot is at
    most ~900 pixels wide, so it draws the same spikes, epochs and failovers from far fewer rows."""
    t0, t1 = int(df["taken_at"].min()), int(df["taken_at"].max())
    df = df.sort_values("taken_at", kind="stable").reset_index(drop=True)
    slave = df["role"] == "SLAVE"
    keys = [
        df["group_name"],
        df["topic"],
        df["queue_id"],
        slave,
        (df["taken_at"] - t0) * bins // max(1, t1 - t0),
    ]
    committed = df.groupby(keys)["committed"]
    keep = set(committed.idxmin()) | set(committed.idxmax())
    series = df.groupby([df["group_name"], df["topic"], df["queue_id"], slave])
    changed = (series["epoch"].diff().fillna(1) != 0) | (series["node"].shift() != df["node"])
    keep |= set(df.index[changed])
    return df.loc[sorted(keep)]


def _read_json(store, key: str, what: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        data = store.get(key, MAX_JSON_DOC_BYTES)
    except ObjectNotFoundError:
        return None, f"{what}: {key} is missing"
    except Exception as exc:
        return None, f"{what}: {key} could not be read ({type(exc).__name__}: {exc})"
    try:
        doc = load_json_doc(data, key)
    except ValueError as exc:
        return None, f"{what}: {key} is not valid JSON ({exc})"
    if not isinstance(doc, dict):
        return None, f"{what}: {key} is not a JSON object"
    return doc, None


def load_run(store, run_id: str, broker_name: str, *, archive: bool = True) -> RunEvidence:
    """Everything the page shows; ``archive=False`` skips the snapshots and events (plots)."""
    prefix = group_prefix(run_id, broker_name)
    missing: list[str] = []
    verdict, note = _read_json(store, prefix + VERDICT_NAME, "verdict")
    if note:
        missing.append(note)
    tables = {}
    for name in at.TABLES:
        tables[name], note = read_table(store, prefix, name)
        if note:
            missing.append(note)
    expectations, _ = _read_json(store, prefix + EXPECTATIONS_NAME, "expectations")
    try:
        has_docs = store.exists(prefix + DATA_DOCS_INDEX)
    except Exception:  # a link we cannot confirm is simply not offered
        has_docs = False
    ev = RunEvidence(run_id, broker_name, prefix, verdict, tables, missing, expectations, has_docs)
    if archive:
        from expectations.evidence.archive_view import load_history

        load_history(store, ev)
    return ev


def list_groups(store, run_id: str) -> list[str]:
    """The groups a run wrote outputs for (folders under ``audits/{runId}/``)."""
    try:
        run_prefix = layout.audit_run_prefix(run_id)
    except layout.LayoutError as exc:
        raise ReportInputError(str(exc)) from exc
    groups = set()
    for info in store.list(run_prefix):
        rest = info.key[len(run_prefix) :].split("/")
        if len(rest) >= 2 and rest[0] and rest[1] in (VERDICT_NAME, "ranges.parquet"):
            groups.add(rest[0])
    return sorted(groups)
