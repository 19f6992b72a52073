"""Compare one audited group's outputs with its generated truth; every mismatch is one line."""

from __future__ import annotations

import io
import json

from contracts import audit_tables as at
from tests.faults.generator import Case, is_null


def load_table(store, run_id: str, group: str, table: str):
    """The table as a list of row dicts (nulls as ``None``), or ``None`` when it is absent."""
    import pandas as pd

    key = f"audits/{run_id}/{group}/{table}.parquet"
    if not store.exists(key):
        return None
    df = pd.read_parquet(io.BytesIO(store.get(key)))
    return df, [
        {k: (None if is_null(v) else v) for k, v in row.items()} for row in df.to_dict("records")
    ]


def judge(store, run_id: str, case: Case) -> list[str]:
    """What the audit got wrong on ``case``: status, check statuses, witnesses, tables."""
    where = case.describe()
    key = f"audits/{run_id}/{case.group}/verdict.json"
    if not store.exists(key):
        return [f"{where}: no verdict.json"]
    verdict = json.loads(store.get(key))
    out = []
    if verdict.get("status") != case.expected_run:
        out.append(f"{where}: run status {verdict.get('status')}, truth {case.expected_run}")
    want_passed = at.run_passed(case.expected_run, require_evidence=False)
    if verdict.get("passed") is not want_passed:
        out.append(f"{where}: passed={verdict.get('passed')}, truth {want_passed}")
    checks = {c.get("name"): c for c in verdict.get("checks", [])}
    for name, want in case.expect.items():
        got = checks.get(name, {}).get("status")
        if want is not None and got != want:
            detail = checks.get(name, {}).get("detail", "")
            out.append(f"{where}: check {name} is {got} ({detail!r}), truth {want}")
        if got == at.STATUS_NO_EVIDENCE and not checks[name].get("detail"):
            out.append(f"{where}: check {name} has no evidence and gives no reason")
    missing = {
        "ranges",
        "records_issues",
        "acknowledged_durability",
        "offset_violations",
        "archive_faults",
    } - set(verdict.get("findings", {}))
    if missing:
        out.append(f"{where}: verdict findings lack {sorted(missing)}")
    return out + _tables(store, run_id, case, checks)


def _tables(store, run_id: str, case: Case, checks: dict) -> list[str]:
    where = case.describe()
    out = []
    tables = {}
    for table, columns in at.TABLE_COLUMNS.items():
        loaded = load_table(store, run_id, case.group, table)
        if loaded is None:
            out.append(f"{where}: no {table} table")
            continue
        df, rows = loaded
        if set(df.columns) != set(columns):
            extra, lacking = set(df.columns) - set(columns), set(columns) - set(df.columns)
            out.append(
                f"{where}: {table} columns: extra {sorted(extra)}, lacking {sorted(lacking)}"
            )
        tables[table] = rows
    for w in case.witnesses:
        rows = tables.get(w.table, [])
        if not any(w.matches(r) for r in rows):
            out.append(f"{where}: no witness {w}; {w.table} has {rows[:5]}")
    for w in case.forbid:
        bad = [r for r in tables.get(w.table, []) if w.matches(r)]
        if bad:
            out.append(f"{where}: false finding {bad[0]} (forbidden: {w})")
    for row in tables.get("checks", []):
        got = checks.get(row.get("check"), {}).get("status")
        if row.get("status") != got:
            out.append(f"{where}: checks table says {row} but verdict.json {got}")
    return out
