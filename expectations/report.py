"""Run the suites over one audit run and publish the data-quality report.

``run_suites(store, run_id, broker_name)`` reads the group's Parquet tables from
``audits/{runId}/{brokerName}/``, validates each with its suite on the run's GX context
(``expectations/validation.py``: built once per run, shared by its groups), builds the group's
Data Docs once, uploads the HTML under ``audits/{runId}/{brokerName}/report/`` and writes
``expectations.json`` (one entry per suite: success, and each failed expectation with what it
found) beside the audit's ``verdict.json``.

GX is imported inside the call, or ahead of it by ``gx_import.prefetch`` (it takes seconds to
import and must not slow a DAG's parse).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from contracts import archive_layout as layout
from contracts.errors import ArchiveError, HaproofError, ObjectNotFoundError
from contracts.read_limits import MAX_PARQUET_BYTES
from expectations import suites
from expectations.parquet_limits import parquet_frame
from expectations.validation import SuiteRunner
from spark_jobs import progress

log = logging.getLogger(__name__)

REPORT_DIR = "report"
SUMMARY_NAME = "expectations.json"


class ExpectationsError(HaproofError):
    """The suites could not run: a table is missing or unreadable."""


@dataclass
class SuiteResult:
    table: str
    suite: str
    success: bool
    evaluated: int
    failed: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ReportResult:
    run_id: str
    broker_name: str
    success: bool
    suites: list[SuiteResult]
    report_key: str  # the report's index.html in the archive
    summary_key: str

    def to_json(self) -> dict[str, Any]:
        """Camel-case keys, as verdict.json."""
        return {
            "runId": self.run_id,
            "brokerName": self.broker_name,
            "success": self.success,
            "report": self.report_key,
            "suites": [
                {
                    "table": s.table,
                    "suite": s.suite,
                    "success": s.success,
                    "evaluated": s.evaluated,
                    "failed": s.failed,
                }
                for s in self.suites
            ],
        }


def group_prefix(run_id: str, broker_name: str) -> str:
    return layout.audit_group_prefix(run_id, broker_name)


def load_table(store, run_id: str, broker_name: str, table: str):

    key = layout.audit_table_key(run_id, broker_name, table)
    try:
        data = store.get(key, MAX_PARQUET_BYTES)
    except ObjectNotFoundError as exc:
        raise ExpectationsError(f"audit table {key} is missing: was the audit run?") from exc
    except ArchiveError as exc:  # not a regular file, larger than a table is read
        raise ExpectationsError(f"audit table {key} cannot be read: {exc}") from exc
    try:
        df = parquet_frame(data, key)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise ExpectationsError(f"audit table {key} is not readable Parquet: {exc}") from exc
    return suites.prepare_frame(table, df)


def _failed(result) -> list[dict[str, Any]]:
    out = []
    for er in result.results:
        if er.success:
            continue
        cfg = er.expectation_config
        kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
        found = {
            k: er.result[k]
            for k in ("observed_value", "unexpected_count", "partial_unexpected_list")
            if k in er.result
        }
        if er.exception_info and er.exception_info.get("raised_exception"):
            found["exception"] = er.exception_info.get("exception_message")
        out.append({"expectation": cfg.type, "kwargs": kwargs, "found": found})
    return out


def _offline(docs_dir: str) -> None:
    """Point the pages at the locked local assets (expectations/datadocs.py)."""
    from expectations.datadocs import DataDocsAssetsError, make_offline

    try:
        make_offline(docs_dir)
    except DataDocsAssetsError as exc:  # the pages still work online; the audit is unaffected
        log.warning("Data Docs will need the network to render: %s", exc)


def _upload_site(store, docs_dir: str, key_prefix: str) -> int:
    from expectations.terminal import Progress

    paths = [os.path.join(d, n) for d, _dirs, files in os.walk(docs_dir) for n in files]
    with Progress("uploading Data Docs", len(paths), prog="haproof audit") as progress:
        for path in paths:
            rel = os.path.relpath(path, docs_dir).replace(os.sep, "/")
            with open(path, "rb") as fh:
                store.put_mutable(f"{key_prefix}{rel}", fh.read())
            progress.advance()
    return len(paths)


def run_suites(
    store,
    run_id: str,
    broker_name: str,
    parameters: dict[str, Any] | None = None,
    runner: SuiteRunner | None = None,
) -> ReportResult:
    """Validate the group's audit tables; publish the HTML report and ``expectations.json``.
    ``runner``: the run's GX context and suites, built once for every group (a new one when
    not given)."""
    params = {**suites.DEFAULT_PARAMETERS, **(parameters or {})}
    progress.line(f"{broker_name}: expectations: reading {len(suites.BUILDERS)} table(s)")
    t0 = time.perf_counter()
    frames = {t: load_table(store, run_id, broker_name, t) for t in suites.BUILDERS}
    runner = runner or SuiteRunner()
    runner.add("read", time.perf_counter() - t0)
    prefix = group_prefix(run_id, broker_name)
    validated = runner.validate(frames, f"haproof-{run_id}", params)
    results = []
    for table, vr in validated.items():
        name = runner.suite_name(table)
        results.append(SuiteResult(table, name, bool(vr.success), len(vr.results), _failed(vr)))
        progress.line(
            f"{broker_name}: expectations: {name} on {table}: "
            f"{'passed' if vr.success else 'FAILED'}"
        )
    with tempfile.TemporaryDirectory(prefix="haproof-gx-") as docs_dir:
        runner.build_docs(docs_dir)
        t1 = time.perf_counter()
        _offline(docs_dir)
        uploaded = _upload_site(store, docs_dir, f"{prefix}{REPORT_DIR}/")
    report = ReportResult(
        run_id=run_id,
        broker_name=broker_name,
        success=all(r.success for r in results),
        suites=results,
        report_key=f"{prefix}{REPORT_DIR}/index.html",
        summary_key=f"{prefix}{SUMMARY_NAME}",
    )
    store.put_mutable(report.summary_key, json.dumps(report.to_json(), indent=2).encode())
    runner.add("publish", time.perf_counter() - t1)
    log.info("data-quality report: %d files under %s%s/", uploaded, prefix, REPORT_DIR)
    return report
