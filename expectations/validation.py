"""Great Expectations set up once per audit run, then every group's tables validated on it.

A :class:`SuiteRunner` imports GX, builds one ephemeral context with its pandas data source,
the seven suites of ``expectations/suites.py`` and one validation definition per table, once;
:meth:`SuiteRunner.validate` then validates a group's tables (each suite on its own DataFrame,
no checkpoint and no action per suite) and builds that group's Data Docs site once, from those
seven results. Before, each suite ran through a checkpoint of its own whose action rebuilt the
site: seven site builds per group (the step's own work 1.6 CPU s for one small group, now 0.6).

Most of the step is GX's import (5.5-6 CPU s; scipy, Altair, its own hundreds of modules). Its
optional SQL, Spark ML and cloud back ends are kept out of it (:data:`UNUSED_BACKENDS`), and
:func:`prefetch` starts it on a background thread, so a caller that knows the suites will run
(``pipeline.steps.run_pipeline``, during the Spark jobs) waits less for it afterwards. Every
phase is timed (:attr:`SuiteRunner.timings_s`: import, context, suites, validation, docs; the
report adds reading the tables and publishing), as ``haproof bench overhead`` reports them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from expectations import suites

SITE = "haproof"
RESULT_FORMAT = {"result_format": "SUMMARY"}

_prefetched: threading.Thread | None = None
_prefetch_lock = threading.Lock()


#: GX's optional back ends the suites never use (they validate pandas DataFrames): GX imports
#: each only when it is installed (``great_expectations/compatibility/``), and the audit's
#: environment has them for other reasons (Airflow's SQLAlchemy, pyspark's ML, cloud SDKs), which
#: made a fifth of GX's import. Not yet imported by anything else, they are kept out of it, as on
#: an install without GX's sql/spark/cloud extras (GX's own stand-ins take their place).
UNUSED_BACKENDS = ("sqlalchemy", "pyspark.ml", "google.cloud", "azure")


def _import_gx() -> None:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # no route to the internet
    if "great_expectations.expectations" in sys.modules:
        return
    hidden = [name for name in UNUSED_BACKENDS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it: ImportError
    try:
        import great_expectations  # noqa: F401
        import great_expectations.expectations  # noqa: F401
        from great_expectations.core.run_identifier import RunIdentifier  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def prefetch(*shared: str) -> None:
    """Start importing GX on a daemon thread (once); :class:`SuiteRunner` waits for it.

    ``shared``: modules the caller imports too while GX's import runs (pyspark's, pandas): they
    are imported here first, in the caller's thread, so the two threads never import one
    package at once (a circular import inside it could then be seen half-initialised)."""
    import importlib

    global _prefetched
    for name in shared:
        importlib.import_module(name)
    with _prefetch_lock:
        if _prefetched is None:
            _prefetched = threading.Thread(target=_import_gx, name="gx-import", daemon=True)
            _prefetched.start()


def _await_import() -> None:
    with _prefetch_lock:
        thread = _prefetched
    if thread is not None:
        thread.join()
    _import_gx()  # imported already (a no-op), or the thread failed: raise its error here


class SuiteRunner:
    """One GX context with every suite, for every group of a run."""

    def __init__(self) -> None:
        self.timings_s: dict[str, float] = {}
        t0 = time.perf_counter()
        _await_import()
        import great_expectations as gx
        import great_expectations.expectations as gxe
        from great_expectations.data_context.types.base import ProgressBarsConfig

        t1 = time.perf_counter()
        self._ctx = gx.get_context(mode="ephemeral")
        self._ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        source = self._ctx.data_sources.add_pandas("haproof_audit")
        t2 = time.perf_counter()
        self._definitions = {}
        for table, build in suites.BUILDERS.items():
            suite = self._ctx.suites.add(build(gx, gxe))
            batch = source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("run")
            self._definitions[table] = self._ctx.validation_definitions.add(
                gx.ValidationDefinition(data=batch, suite=suite, name=f"haproof-{table}")
            )
        t3 = time.perf_counter()
        self.timings_s = {"import": t1 - t0, "context": t2 - t1, "suites": t3 - t2}
        self._sites = 0

    def suite_name(self, table: str) -> str:
        return self._definitions[table].suite.name

    def validate(self, frames: dict[str, Any], run_name: str, parameters: dict[str, Any]):
        """Each table's suite on its frame: {table: ExpectationSuiteValidationResult}."""
        from great_expectations.core.run_identifier import RunIdentifier

        t0 = time.perf_counter()
        run_id = RunIdentifier(run_name=run_name)
        out = {
            table: vd.run(
                batch_parameters={"dataframe": frames[table]},
                expectation_parameters=parameters,
                result_format=RESULT_FORMAT,
                run_id=run_id,
            )
            for table, vd in self._definitions.items()
        }
        self.add("validation", time.perf_counter() - t0)
        return out

    def build_docs(self, docs_dir: str) -> None:
        """The Data Docs site of the last :meth:`validate` in ``docs_dir``, built once; the
        results are then dropped, so the next group's site shows only its own."""
        t0 = time.perf_counter()
        self._sites += 1
        name = f"{SITE}-{self._sites}"
        self._ctx.add_data_docs_site(
            site_name=name,
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": docs_dir,
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
        try:
            self._ctx.build_data_docs(site_names=[name])
        finally:
            self._ctx.delete_data_docs_site(name)
            results = self._ctx.validation_results_store
            for key in results.list_keys():
                results.remove_key(key)
        self.add("docs", time.perf_counter() - t0)

    def add(self, phase: str, seconds: float) -> None:
        """Count ``seconds`` more in ``phase`` (the report adds reading and publishing)."""
        self.timings_s[phase] = self.timings_s.get(phase, 0.0) + seconds
